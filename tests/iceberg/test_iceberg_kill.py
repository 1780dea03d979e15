"""The Iceberg connector family's one real driver SIGKILL sequence, on a sqlite SQL catalog with
a local warehouse: the ``sparklink.iceberg`` source on a table pyiceberg writes (``table.append``,
one data file per snapshot; ``maxFilesPerTrigger=1``: one file per micro-batch) streamed into
``sparklink.iceberg``, the target table not created beforehand, with one more pyiceberg append
while the driver is down after each of the first two kills; and a second query of the same driver
streaming JSON files into another table with ``df.write`` inside ``foreachBatch`` (``txnAppId`` /
``txnVersion`` = the batch id). The driver's whole process group is SIGKILLed three times, each
time once both tables have a new snapshot (observable progress, no timer), then an availableNow
run finishes. pyiceberg's scan reads every id exactly once in both tables, and no batch id or txn
version is committed twice. So this one sequence proves the source (its offsets across restarts)
and the sink; the sink on an S3 warehouse under a real kill is not repeated here (S3 is a storage
seam: test_iceberg_on_s3.py's ``TestIcebergSinkOnS3`` simulates its crashes).

A third query of the same driver streams a generated changelog (inserts, updates, deletes, keys
changed several times in one file, out-of-order sequence values; one file per micro-batch) into a
``writeMode=upsert`` table under the same kills: afterwards pyiceberg's scan equals a plain dict
replaying the changelog micro-batch by micro-batch as Spark grouped the files
(tests/delta/changelog.py, the same reference as the Delta sequence's), and in all three tables no
data file is left that no snapshot references (the sweep of files of failed attempts)."""

from __future__ import annotations

import json
import random

import pytest

from sparklink.iceberg.sweep import referenced_files
from tests.delta.changelog import expected_state, spark_micro_batches, write_changelog_files
from tests.iceberg.iceberg_readers import catalog_options, load_table, scan_ids, sparklink_snapshots
from tests.iceberg.jobs_iceberg import streams_into_iceberg
from tests.iceberg.source_tables import append_snapshots
from tests.iceberg.test_iceberg_upsert import table_state

JOB = "tests.iceberg.jobs_iceberg:streams_into_iceberg"
FILES, ROWS_PER_FILE = 8, 40  # the source table's first snapshots, and the foreachBatch query's JSON files
LATE_FILES = 2  # one more source snapshot while the driver is down after each of the first two kills
CHANGES_PER_FILE, KEYS = 60, 50


def changelog_batches() -> list[list[dict]]:
    """One batch of changes per changelog file (``id, v, seq, op``): keys repeated within a
    batch, deletes, sequence values older than others. A key's sequence values are unique across
    all the files, not only within one: a kill between Spark's file source log and its offset log
    makes the restart read two files in one micro-batch, where a key with the same value in both
    would be a tie, which the contract refuses."""
    rng = random.Random(40)
    batches, seq, used = [], 0, set()
    for number in range(FILES):
        rows = []
        for _ in range(CHANGES_PER_FILE):
            seq += 1
            key = rng.randrange(KEYS)
            value = seq - rng.randrange(40) if rng.random() < 0.2 else seq  # out of order: older than others
            if (key, value) in used:
                continue  # one change per key and sequence value (ties are refused by the contract)
            used.add((key, value))
            op = "d" if rng.random() < 0.25 else rng.choice(["c", "u", "r"])
            rows.append({"id": key, "v": f"f{number}-{seq}", "seq": value, "op": op})
        batches.append(rows)
    return batches


def unreferenced_data_files(options: dict) -> list[str]:
    table = load_table(options)
    data = table.location().rstrip("/") + "/data"
    on_disk = {f"file://{p}" for p in __import__("pathlib").Path(data[len("file://"):]).rglob("*.parquet")}
    return sorted(on_disk - referenced_files(table))


def snapshot_count(options: dict) -> int:
    from pyiceberg.catalog import load_catalog
    from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

    properties = {k[len("catalog."):]: v for k, v in options.items() if k.startswith("catalog.")}
    try:
        return len(load_catalog("default", **properties).load_table(options["table"]).snapshots())
    except (NoSuchTableError, NoSuchNamespaceError):
        return 0


@pytest.mark.slow
def test_driver_sigkilled_three_times_mid_stream(driver, tmp_path, spark):
    landing = tmp_path / "landing"
    landing.mkdir()
    for number in range(FILES):
        lines = [json.dumps({"id": number * ROWS_PER_FILE + i, "label": f"row-{number}-{i}"})
                 for i in range(ROWS_PER_FILE)]
        (landing / f"part-{number:03d}.json").write_text("\n".join(lines) + "\n")
    source = catalog_options(tmp_path / "source", "db.events")
    append_snapshots(source, FILES, ROWS_PER_FILE)
    options = catalog_options(tmp_path / "iceberg")
    foreach_batch = catalog_options(tmp_path / "iceberg", table="db.batches")
    changes_landing = tmp_path / "changes"
    changes_landing.mkdir()
    changelog = changelog_batches()
    write_changelog_files(changes_landing, changelog)  # mtimes a second apart: one file per micro-batch, in order
    upsert = dict(catalog_options(tmp_path / "iceberg", table="db.state"), writeMode="upsert", keyColumns="id",
                  opColumn="op", sequenceColumn="seq")
    args = {"source": source, "landing": str(landing), "checkpoint": str(tmp_path / "ck"), "options": options,
            "available_now": False, "foreach_batch": foreach_batch,
            "changelog": {"landing": str(changes_landing), "options": upsert}}
    mid_stream, files = [], FILES
    for kill in range(3):
        if kill:  # more arrives while the query is down: a snapshot after those it has read
            append_snapshots(source, 1, ROWS_PER_FILE, first_id=files * ROWS_PER_FILE)
            files += 1
        # a query that has read every file has nothing more to show: wait for the other one only
        targets = (min(snapshot_count(options) + 1, files), min(snapshot_count(foreach_batch) + 1, FILES))
        process = driver.start(JOB, args)
        process.kill_when(lambda targets=targets: snapshot_count(options) >= targets[0]
                          and snapshot_count(foreach_batch) >= targets[1],
                          what=f"snapshots {targets} in the two tables")
        mid_stream.append(snapshot_count(options) < files or snapshot_count(foreach_batch) < FILES)
    # the first kill lands mid-stream (one snapshot in each table); a later one may find a query
    # done (the other's progress decides when it lands), which is still a kill to recover from
    assert mid_stream[0], "the streams ended before the first kill"
    streams_into_iceberg(spark, **{**args, "available_now": True})  # the last run, in the test's session
    assert files == FILES + LATE_FILES
    assert scan_ids(options) == list(range(files * ROWS_PER_FILE))
    batches = [int(s["sparklink.batch-id"]) for s in sparklink_snapshots(options)]
    assert batches == sorted(set(batches))  # one snapshot per micro-batch, none twice
    assert scan_ids(foreach_batch) == list(range(FILES * ROWS_PER_FILE))
    versions = [int(s["sparklink.txn-version"]) for s in sparklink_snapshots(foreach_batch)]
    assert versions == sorted(set(versions))  # one snapshot per foreachBatch call, none twice
    # the reference replays the micro-batches as Spark's file source grouped the files (a kill between
    # the source's log and the offset log makes the restart read two files in one micro-batch)
    expected = expected_state(spark_micro_batches(tmp_path / "ck-changelog", changelog))
    assert table_state(upsert) == expected
    upsert_batches = [int(s["sparklink.batch-id"]) for s in sparklink_snapshots(upsert)]
    assert upsert_batches == sorted(set(upsert_batches))
    for table in (options, foreach_batch, upsert):
        assert unreferenced_data_files(table) == [], table["table"]
