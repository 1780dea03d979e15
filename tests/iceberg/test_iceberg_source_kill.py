"""The Iceberg source's real driver SIGKILL sequence, which is also the sink's on S3: a table
written by pyiceberg (``table.append``) on a local warehouse, streamed by the ``sparklink.iceberg``
source (one data file per micro-batch) into the ``sparklink.iceberg`` sink on a SeaweedFS
warehouse. The driver's process group is SIGKILLed twice (the suite's time budget), each time once
the sink's table shows a new snapshot (observable progress, no timer); more snapshots are appended
to the source while the query is down; a final availableNow run finishes. pyiceberg's scan of the
sink's table reads every id exactly once, and no batch id is committed twice."""

from __future__ import annotations

from collections import Counter

import pytest

from tests.iceberg.iceberg_readers import catalog_options, scan_ids, sparklink_snapshots
from tests.iceberg.jobs_iceberg import iceberg_to_iceberg
from tests.iceberg.source_tables import append_snapshots, catalog_of

JOB = "tests.iceberg.jobs_iceberg:iceberg_to_iceberg"
ROWS = 30


def sink_snapshots(options: dict) -> int:
    from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

    try:
        return len(catalog_of(options).load_table(options["table"]).snapshots())
    except (NoSuchTableError, NoSuchNamespaceError):
        return 0


@pytest.mark.slow
def test_source_to_sink_on_s3_driver_sigkilled_twice(driver, spark, tmp_path, s3_server, s3_bucket):
    source = catalog_options(tmp_path / "src", "db.events")
    append_snapshots(source, 6, ROWS)
    sink = {"table": "db.copy", "catalog.type": "sql", "catalog.uri": f"sqlite:///{tmp_path}/sink-catalog.db",
            "catalog.warehouse": f"s3://{s3_bucket}/warehouse", "catalog.s3.endpoint": s3_server.endpoint,
            "catalog.s3.region": s3_server.region, "catalog.s3.access-key-id": s3_server.access_key_id,
            "catalog.s3.secret-access-key": s3_server.secret_access_key}
    args = {"source": source, "sink": sink, "checkpoint": str(tmp_path / "ck"), "available_now": False}
    snapshots = 6
    for _kill in range(2):
        target = sink_snapshots(sink) + 1
        driver.start(JOB, args).kill_when(lambda target=target: sink_snapshots(sink) >= target,
                                          what=f"snapshot {target} in the sink's table", timeout=300)
        append_snapshots(source, 2, ROWS, first_id=snapshots * ROWS)  # more arrives while the query is down
        snapshots += 2
    assert sink_snapshots(sink) < snapshots, "the stream caught up before the last kill"
    iceberg_to_iceberg(spark, **dict(args, available_now=True))
    counts = Counter(scan_ids(sink))
    assert {i: c for i, c in counts.items() if c > 1} == {}
    assert sorted(counts) == list(range(snapshots * ROWS))
    batches = [int(s["sparklink.batch-id"]) for s in sparklink_snapshots(sink)]
    assert batches == sorted(set(batches))
    listed = s3_server.client().list_objects_v2(Bucket=s3_bucket, Prefix="warehouse/")
    assert any(o["Key"].endswith(".parquet") for o in listed.get("Contents", []))
