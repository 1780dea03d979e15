"""The Delta sink's compaction (``compaction.everyNCheckpoints``): a ``dataChange=false``
rewrite after every N-th micro-batch, once per micro-batch across replays. Micro-batches are
driven through the adapter's calls without Spark (as the conformance suite does); tables are
read back with delta-rs, the rewrite's actions from the commit files delta-rs wrote."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from deltalake import DeltaTable

from sparklink.delta.app_id import stream_app_id
from sparklink.delta.sink import DeltaSink
from sparklink.errors import ConfigError
from sparklink.testing.conformance.outputs import SEQUENCE_SCHEMA
from sparklink.testing.conformance.sinks import run_micro_batch
from tests.delta.readers import (
    delta_ids,
    delta_storage_options,
    unreferenced_files,
    unreferenced_objects,
)


def _optimize_commits(log: Path) -> list[list[dict]]:
    """The actions of each OPTIMIZE commit of a local table, in version order."""
    commits = []
    for entry in sorted(log.glob("*.json")):
        actions = [json.loads(line) for line in entry.read_text().splitlines() if line.strip()]
        if any(a.get("commitInfo", {}).get("operation") == "OPTIMIZE" for a in actions):
            commits.append(actions)
    return commits


def test_every_second_micro_batch_is_followed_by_a_data_change_false_rewrite(tmp_path):
    table, ck = tmp_path / "table", tmp_path / "ck"
    options = {"path": str(table), "checkpointLocation": str(ck), "compaction.everyNCheckpoints": "2"}
    for batch in range(4):
        run_micro_batch(DeltaSink(options, SEQUENCE_SCHEMA), batch, 3, f"job-{batch}")
    assert delta_ids(table) == list(range(40))
    delta = DeltaTable(str(table))
    assert [h["operation"] for h in delta.history()].count("OPTIMIZE") == 2
    rewrites = _optimize_commits(table / "_delta_log")
    assert len(rewrites) == 2
    for actions in rewrites:
        changes = [a.get("add") or a.get("remove") for a in actions if "add" in a or "remove" in a]
        assert changes and all(change["dataChange"] is False for change in changes)
        assert any("remove" in a for a in actions) and any("add" in a for a in actions)
    assert len(delta.get_add_actions(flatten=True)) == 1  # 6 files of batches 2-3 (and batches 0-1's one) into one
    app_id = stream_app_id(ck)
    assert [h.get("sparklink.compaction") for h in delta.history() if h["operation"] == "OPTIMIZE"] == \
        [f"{app_id}:3", f"{app_id}:1"]
    # Spark replays micro-batch 3: discarded, and not compacted again
    run_micro_batch(DeltaSink(options, SEQUENCE_SCHEMA), 3, 2, "job-3-replayed")
    assert [h["operation"] for h in DeltaTable(str(table)).history()].count("OPTIMIZE") == 2
    assert delta_ids(table) == list(range(40))
    assert unreferenced_files(table) == []


def test_compaction_on_s3(s3_server, s3_bucket, tmp_path):
    path = f"s3://{s3_bucket}/table"
    options = {"path": path, "checkpointLocation": str(tmp_path / "ck"), "compaction.everyNCheckpoints": "2",
               **s3_server.options()}
    for batch in range(2):
        run_micro_batch(DeltaSink(options, SEQUENCE_SCHEMA), batch, 2, f"job-{batch}")
    delta = DeltaTable(path, storage_options=delta_storage_options(s3_server))
    assert delta_ids(path, storage_options=delta_storage_options(s3_server)) == list(range(20))
    assert [h["operation"] for h in delta.history()].count("OPTIMIZE") == 1
    assert len(delta.get_add_actions(flatten=True)) == 1
    assert unreferenced_objects(s3_server, path) == []


@pytest.mark.parametrize(("options", "problem"), [
    ({"compaction.everyNCheckpoints": "0"}, "must be at least 1"),
    ({"compaction.targetFileSize": "64MB"}, "only together with compaction.everyNCheckpoints"),
    ({"compaction.everyNCheckpoints": "2", "compaction.targetFileSize": "huge"}, "compaction.targetFileSize"),
])
def test_bad_compaction_options_are_refused(options, problem):
    with pytest.raises(ConfigError, match=problem):
        DeltaSink({"path": "/t", **options}, SEQUENCE_SCHEMA)


def test_compaction_is_refused_for_df_write():
    sink = DeltaSink({"path": "/t", "compaction.everyNCheckpoints": "2"}, SEQUENCE_SCHEMA)
    with pytest.raises(ConfigError, match="applies to streams"):
        sink.prepare_tasks()


@pytest.mark.parametrize("point", ["delta.before_compaction", "delta.after_compaction"])
def test_a_crash_around_the_compaction_compacts_once(point, tmp_path, monkeypatch):
    """Micro-batch 1 (the 2nd: compaction due) is committed, then the driver dies before or
    after the compaction's commit; the restart rolls the micro-batch forward (its txn is in the
    table: nothing to commit) and compacts only if the compaction's marker is not there yet."""
    from sparklink.errors import FaultInjected
    from sparklink.faults import ENV_FAULT
    from sparklink.testing.faults import ENV_BATCH

    table = tmp_path / "table"
    options = {"path": str(table), "checkpointLocation": str(tmp_path / "ck"), "compaction.everyNCheckpoints": "2"}
    run_micro_batch(DeltaSink(options, SEQUENCE_SCHEMA), 0, 2, "job-0")
    with monkeypatch.context() as armed:
        armed.setenv(ENV_FAULT, f"{point}:raise")
        armed.setenv(ENV_BATCH, "1")
        with pytest.raises(FaultInjected):
            run_micro_batch(DeltaSink(options, SEQUENCE_SCHEMA), 1, 2, "job-1")
    run_micro_batch(DeltaSink(options, SEQUENCE_SCHEMA), 1, 3, "job-1-replayed")
    run_micro_batch(DeltaSink(options, SEQUENCE_SCHEMA), 2, 2, "job-2")
    assert [h["operation"] for h in DeltaTable(str(table)).history()].count("OPTIMIZE") == 1
    assert delta_ids(table) == list(range(30))
    assert unreferenced_files(table) == []
