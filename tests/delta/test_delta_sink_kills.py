"""The Delta sink's real driver SIGKILL sequence: a stream of JSON files into ``sparklink.delta``
(table not created beforehand) and, in the same driver, a second query streaming JSON files and
writing each micro-batch with ``df.write`` inside ``foreachBatch`` (``txnAppId`` / ``txnVersion`` =
batch id) into another table (more files than the first: its micro-batches are quicker, and it
must still be running at the last kill); the driver SIGKILLed three times mid-stream once both Delta logs show progress, then a final
availableNow run. delta-rs reads every id exactly once in each table, and each log holds its
writer's ``txn`` markers, each version once. A third query in the same driver streams a
generated changelog (inserts, updates, deletes, keys repeated within a micro-batch, sequence
values out of order) into a ``writeMode=upsert`` table under the same kills: delta-rs reads
exactly the state a plain dict replaying the changelog gives."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from deltalake import DeltaTable

from sparklink.delta.app_id import app_id_path
from sparklink.delta.files import file_tag
from tests.delta.changelog import expected_state, generate, spark_micro_batches, write_changelog_files
from tests.delta.jobs import FOREACH_APP, json_to_delta, write_json_file
from tests.delta.readers import unreferenced_files

JOB = "tests.delta.jobs:json_to_delta"
FILES, ROWS_PER_FILE = 12, 5
FOREACH_FILES = 24  # the foreachBatch query's micro-batches run about twice as fast as the stream's
CHANGELOG_FILES, CHANGES_PER_FILE, KEYS = 12, 12, 20  # as many micro-batches as the stream's


def _versions(table: Path) -> int:
    log = table / "_delta_log"
    return len(list(log.glob("*.json"))) if log.is_dir() else 0


def _txn_versions(table: Path, app_id: str) -> list[int]:
    return [json.loads(line)["txn"]["version"] for entry in sorted((table / "_delta_log").glob("*.json"))
            for line in entry.read_text().splitlines() if '"txn"' in line and json.loads(line)["txn"]["appId"] == app_id]


def _every_id_once(table: Path, files: int) -> None:
    rows = DeltaTable(str(table)).to_pyarrow_table()
    counts = Counter(rows.column("id").to_pylist())
    assert {i: c for i, c in counts.items() if c > 1} == {}, f"{table.name}: ids more than once"
    assert sorted(counts) == list(range(files * ROWS_PER_FILE)), f"{table.name}: ids missing"
    assert rows.column("grp").to_pylist() == [i % 3 for i in rows.column("id").to_pylist()]


@pytest.mark.slow
def test_driver_sigkilled_three_times_mid_stream(driver, tmp_path, spark):
    src, table, ck, foreach = tmp_path / "in", tmp_path / "table", tmp_path / "ck", tmp_path / "foreach"
    for directory, files in ((src, FILES), (tmp_path / "in-fb", FOREACH_FILES)):
        directory.mkdir()
        for index in range(files):
            write_json_file(directory, f"f-{index:03d}.json",
                            range(index * ROWS_PER_FILE, (index + 1) * ROWS_PER_FILE))
    changelog = generate(CHANGELOG_FILES, CHANGES_PER_FILE, KEYS)
    write_changelog_files(tmp_path / "in-cl", changelog)
    upserts = tmp_path / "upserts"
    args = {"src": str(src), "table": str(table), "checkpoint": str(ck), "available_now": False,
            "foreach_src": str(tmp_path / "in-fb"), "foreach_table": str(foreach),
            "changelog_src": str(tmp_path / "in-cl"), "changelog_table": str(upserts)}
    seen = seen_foreach = seen_upserts = 0
    for jitter in (0.0, 0.3, 0.6):
        process = driver.start(JOB, args)
        # two more Delta versions in each table
        target, target_foreach, target_upserts = seen + 2, seen_foreach + 2, seen_upserts + 2
        process.kill_when(lambda target=target, target_foreach=target_foreach, target_upserts=target_upserts:
                          _versions(table) >= target and _versions(foreach) >= target_foreach
                          and _versions(upserts) >= target_upserts,
                          what=f"Delta log versions {target - 1}, {target_foreach - 1} (foreachBatch) and "
                               f"{target_upserts - 1} (upserts)",
                          timeout=240, jitter=jitter)
        seen, seen_foreach, seen_upserts = _versions(table), _versions(foreach), _versions(upserts)
    assert seen < FILES + 1 and seen_foreach < FOREACH_FILES + 1 and seen_upserts < CHANGELOG_FILES + 1, \
        "a query ended before the last kill: use more files"
    json_to_delta(spark, **dict(args, available_now=True))

    _every_id_once(table, FILES)
    _every_id_once(foreach, FOREACH_FILES)
    app_id = json.loads(app_id_path(ck).read_text())["appId"]
    for path, writer in ((table, app_id), (foreach, FOREACH_APP)):
        versions = _txn_versions(path, writer)
        assert versions and versions == sorted(set(versions)), f"a micro-batch committed twice: {versions}"
        assert DeltaTable(str(path)).transaction_version(writer) == versions[-1]
    markers = [json.loads(line)["txn"]["appId"] for entry in sorted((table / "_delta_log").glob("*.json"))
               for line in entry.read_text().splitlines() if '"txn"' in line]
    assert set(markers) == {app_id}
    # a failed attempt's files are removed once its micro-batch commits; a kill inside that
    # clean-up may leave some, which then carry this stream's tag (left to VACUUM)
    tag = file_tag(app_id, "")
    assert all(Path(name).name.startswith(f"part-{tag}-") for name in unreferenced_files(table))

    # the upsert table: exactly the dict's replay of the micro-batches Spark's file source made of
    # the changelog files (usually one file each; two when a kill fell between its logs), each
    # micro-batch one MERGE with its txn once
    micro_batches = spark_micro_batches(Path(str(ck) + "-cl"), changelog)
    expected = expected_state(micro_batches)
    assert len(expected) < KEYS, "the changelog deletes no key for good: change the seed"
    rows = DeltaTable(str(upserts)).to_pyarrow_table().to_pylist()
    assert len(rows) == len({r["id"] for r in rows}), "a key twice in the upsert table"
    assert {r["id"]: (r["v"], r["seq"]) for r in rows} == expected
    upsert_app = json.loads(app_id_path(Path(str(ck) + "-cl")).read_text())["appId"]
    versions = _txn_versions(upserts, upsert_app)
    assert versions == list(range(len(micro_batches))), f"a micro-batch merged twice or never: {versions}"
    staged = upserts / "_sparklink" / "staged-changes"
    upsert_tag = file_tag(upsert_app, "")
    assert all(p.name.startswith(f"part-{upsert_tag}-") for p in staged.glob("*")), "staged files of another writer"
