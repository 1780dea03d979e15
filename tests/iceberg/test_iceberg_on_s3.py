"""The Iceberg sink with its warehouse on S3 (SeaweedFS; pyiceberg's S3 FileIO properties as
``catalog.s3.*`` options), the catalog in sqlite: the conformance suite's simulated crashes."""

from __future__ import annotations

import pytest

from sparklink.iceberg.sink import IcebergSink
from sparklink.testing.conformance import SinkConformance
from tests.iceberg.iceberg_readers import scan_ids


class TestIcebergSinkOnS3(SinkConformance):
    format = "sparklink.iceberg"
    sink_factory = IcebergSink
    refuses_second_query = False
    connector_points = ("iceberg.after_write", "iceberg.before_commit", "iceberg.after_commit")
    sigkill_points = ()  # the family's kill sequence is test_iceberg_kill.py (local warehouse)
    task_failure_points = ("iceberg.after_write",)

    @pytest.fixture
    def sink_options(self, tmp_path, s3_server, s3_bucket):
        return {"table": "db.events", "catalog.type": "sql", "catalog.uri": f"sqlite:///{tmp_path}/catalog.db",
                "catalog.warehouse": f"s3://{s3_bucket}/warehouse", "catalog.s3.endpoint": s3_server.endpoint,
                "catalog.s3.region": s3_server.region, "catalog.s3.access-key-id": s3_server.access_key_id,
                "catalog.s3.secret-access-key": s3_server.secret_access_key}

    def read_ids(self, options):
        return scan_ids(options)

    def test_data_files_are_objects_in_the_bucket(self, sink_options, tmp_path, s3_server, s3_bucket):
        from sparklink.testing.conformance.sinks import run_micro_batch
        from tests.iceberg.iceberg_readers import load_table

        options = dict(sink_options, checkpointLocation=str(tmp_path / "ck"))
        run_micro_batch(self.make_sink(options), 0, 2, "job-0")
        files = [f["file_path"] for f in load_table(options).inspect.files().to_pylist()]
        listed = s3_server.client().list_objects_v2(Bucket=s3_bucket, Prefix="warehouse/")
        keys = {f"s3://{s3_bucket}/{o['Key']}" for o in listed.get("Contents", [])}
        assert len(files) == 2 and set(files) <= keys
        assert scan_ids(options) == list(range(10))
