"""The Delta connector family's one real driver SIGKILL sequence. Three queries in one driver:
the ``sparklink.delta`` source on a local table delta-rs writes (20 appends, one data file each;
``maxFilesPerTrigger=1``: one source file per micro-batch, its initial snapshot first) streamed
into the ``sparklink.delta`` sink (table not created beforehand, partitioned by ``grp``), with one
more delta-rs append while the driver is down after each of the first two kills (read as versions
after the snapshot); a second query streaming JSON files and writing each micro-batch with
``df.write`` inside ``foreachBatch`` (``txnAppId`` / ``txnVersion`` = batch id) into another table
(more files than the first: it must still be running at the last kill); a third streaming a
generated changelog (inserts, updates, deletes, keys repeated within a micro-batch, sequence
values out of order) into a ``writeMode=upsert`` table. The driver
is SIGKILLed three times mid-stream once the three Delta logs show progress, then a final
availableNow run. delta-rs reads every id exactly once in each append table, each log holds its
writer's ``txn`` markers, each version once, and the upsert table holds exactly the state a plain
dict replaying the changelog gives. So this one sequence proves the source (snapshot and version
offsets across restarts) and the sink; the sink on S3 under a real kill is not repeated here (S3
is a storage seam: its leftovers and crashes are simulated in test_delta_sink_conformance.py's
``TestDeltaSinkOnS3``)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from sparklink.delta.app_id import app_id_path
from sparklink.delta.files import file_tag
from tests.delta.changelog import expected_state, generate, spark_micro_batches, write_changelog_files
from tests.delta.jobs import FOREACH_APP, streams_into_delta, write_json_file
from tests.delta.readers import unreferenced_files

JOB = "tests.delta.jobs:streams_into_delta"
FILES, ROWS_PER_FILE = 20, 5  # the source table's initial appends (its query is as quick as the foreachBatch one)
LATE_FILES = 2  # one more append while the driver is down after each of the first two kills
FOREACH_FILES = 24  # more micro-batches than the others: the foreachBatch query must still run at the last kill
CHANGELOG_FILES, CHANGES_PER_FILE, KEYS = 12, 12, 20  # fewer: its micro-batches (one MERGE each) are the slowest


def _versions(table: Path) -> int:
    log = table / "_delta_log"
    return len(list(log.glob("*.json"))) if log.is_dir() else 0


def _txn_versions(table: Path, app_id: str) -> list[int]:
    return [json.loads(line)["txn"]["version"] for entry in sorted((table / "_delta_log").glob("*.json"))
            for line in entry.read_text().splitlines() if '"txn"' in line and json.loads(line)["txn"]["appId"] == app_id]


def _append(table: Path, index: int) -> None:
    """One delta-rs append (one version, one data file) of the ids of source file ``index``."""
    ids = pa.array(range(index * ROWS_PER_FILE, (index + 1) * ROWS_PER_FILE), pa.int64())
    grp = pa.array([i % 3 for i in ids.to_pylist()], pa.int32())
    payload = pa.array([f"p-{i}" for i in ids.to_pylist()])
    write_deltalake(str(table), pa.table({"id": ids, "grp": grp, "payload": payload}), mode="append")


def _every_id_once(table: Path, files: int) -> None:
    rows = DeltaTable(str(table)).to_pyarrow_table()
    counts = Counter(rows.column("id").to_pylist())
    assert {i: c for i, c in counts.items() if c > 1} == {}, f"{table.name}: ids more than once"
    assert sorted(counts) == list(range(files * ROWS_PER_FILE)), f"{table.name}: ids missing"
    assert rows.column("grp").to_pylist() == [i % 3 for i in rows.column("id").to_pylist()]


@pytest.mark.slow
def test_driver_sigkilled_three_times_mid_stream(driver, tmp_path, spark):
    source, table, ck, foreach = tmp_path / "source", tmp_path / "table", tmp_path / "ck", tmp_path / "foreach"
    for index in range(FILES):
        _append(source, index)
    (tmp_path / "in-fb").mkdir()
    for index in range(FOREACH_FILES):
        write_json_file(tmp_path / "in-fb", f"f-{index:03d}.json",
                        range(index * ROWS_PER_FILE, (index + 1) * ROWS_PER_FILE))
    changelog = generate(CHANGELOG_FILES, CHANGES_PER_FILE, KEYS)
    write_changelog_files(tmp_path / "in-cl", changelog)
    upserts = tmp_path / "upserts"
    args = {"source_table": str(source), "table": str(table), "checkpoint": str(ck), "available_now": False,
            "foreach_src": str(tmp_path / "in-fb"), "foreach_table": str(foreach),
            "changelog_src": str(tmp_path / "in-cl"), "changelog_table": str(upserts)}
    tables = {"stream": table, "foreachBatch": foreach, "upserts": upserts}
    seen = dict.fromkeys(tables, 0)
    killed_mid_stream = dict.fromkeys(tables, 0)
    files = FILES
    for kill, jitter in enumerate((0.0, 0.3, 0.6)):
        if kill:  # more arrives while the query is down: a version after the initial snapshot
            _append(source, files)
            files += 1
        # a table's last version (its version 0 creates it): one per input file
        last = {"stream": files + 1, "foreachBatch": FOREACH_FILES + 1, "upserts": CHANGELOG_FILES + 1}
        targets = {name: min(seen[name] + 2, last[name]) for name in tables}  # two more versions, or the last
        process = driver.start(JOB, args)
        process.kill_when(lambda targets=targets: all(_versions(tables[name]) >= target
                                                      for name, target in targets.items()),
                          what="Delta log versions " + ", ".join(f"{t - 1} ({name})" for name, t in targets.items()),
                          timeout=240, jitter=jitter)
        seen = {name: _versions(path) for name, path in tables.items()}
        for name in tables:
            killed_mid_stream[name] += seen[name] < last[name]
    assert files == FILES + LATE_FILES
    # the queries run at their own pace in one driver: each must have been killed mid-stream at
    # least twice (a quick one may read all its input during the last run)
    assert all(count >= 2 for count in killed_mid_stream.values()), \
        f"a query ended before its second kill: {killed_mid_stream} (versions {seen}): use more files"
    streams_into_delta(spark, **dict(args, available_now=True))

    _every_id_once(table, files)
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
