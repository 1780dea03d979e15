"""One real driver SIGKILL sequence for two things at once: the ``sparklink.delta`` source
(a local table written by delta-rs, 12 versions) streamed into the ``sparklink.delta`` sink on S3
(SeaweedFS). The driver is SIGKILLed twice once the S3 table's log shows progress, then a final
availableNow run: delta-rs reads every row of the S3 table exactly once, the log's ``txn``
markers of the stream strictly increase, and whatever the table does not reference carries the
stream's tag (a killed attempt's, left to VACUUM)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from sparklink.delta.app_id import app_id_path
from sparklink.delta.files import file_tag
from tests.delta.jobs import delta_to_delta
from tests.delta.readers import delta_storage_options, open_delta, unreferenced_objects

JOB = "tests.delta.jobs:delta_to_delta"
VERSIONS, ROWS = 12, 10


def _log_versions(client, bucket: str) -> int:
    listed = client.list_objects_v2(Bucket=bucket, Prefix="events/_delta_log/")
    return sum(1 for o in listed.get("Contents", ()) if o["Key"].endswith(".json"))


@pytest.mark.slow
def test_delta_source_into_the_s3_sink_driver_sigkilled_twice(driver, tmp_path, spark, s3_server, s3_bucket):
    table, ck = tmp_path / "t", tmp_path / "ck"
    out = f"s3a://{s3_bucket}/events"
    for v in range(VERSIONS):
        ids = pa.array(range(v * ROWS, (v + 1) * ROWS), pa.int64())
        write_deltalake(str(table), pa.table({"id": ids, "v": pa.compute.multiply(ids, 2)}), mode="append")
    args = {"table": str(table), "out": out, "checkpoint": str(ck), "sink_options": s3_server.options(),
            "available_now": False}
    client = s3_server.client()
    for target, jitter in ((3, 0.0), (6, 0.3)):  # log versions: 0 is the table's creation
        driver.start(JOB, args).kill_when(lambda target=target: _log_versions(client, s3_bucket) >= target,
                                          what=f"S3 Delta log version {target - 1}", timeout=240, jitter=jitter)
    assert _log_versions(client, s3_bucket) < VERSIONS + 1, "the stream ended before the last kill"
    delta_to_delta(spark, **dict(args, available_now=True))

    delta = open_delta(out, delta_storage_options(s3_server))
    rows = delta.to_pyarrow_table()
    counts = Counter(rows.column("id").to_pylist())
    assert {i: c for i, c in counts.items() if c > 1} == {}
    assert sorted(counts) == list(range(VERSIONS * ROWS))
    assert rows.column("v").to_pylist() == [2 * i for i in rows.column("id").to_pylist()]

    app_id = json.loads(app_id_path(Path(ck)).read_text())["appId"]
    markers = _txn_markers(client, s3_bucket)
    assert markers and {m["appId"] for m in markers} == {app_id}
    versions = [m["version"] for m in markers]
    assert versions == sorted(set(versions)), f"a micro-batch committed twice: {versions}"
    assert delta.transaction_version(app_id) == versions[-1]
    tag = file_tag(app_id, "")
    assert all(f"part-{tag}-" in name for name in unreferenced_objects(s3_server, out))


def _txn_markers(client, bucket: str) -> list[dict]:
    """The ``txn`` actions of the S3 table's commit files, in version order (read with boto3)."""
    listed = client.list_objects_v2(Bucket=bucket, Prefix="events/_delta_log/")
    keys = sorted(o["Key"] for o in listed.get("Contents", ()) if o["Key"].endswith(".json"))
    markers = []
    for key in keys:
        for line in client.get_object(Bucket=bucket, Key=key)["Body"].read().decode().splitlines():
            action = json.loads(line)
            if "txn" in action:
                markers.append(action["txn"])
    return markers
