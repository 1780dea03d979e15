"""The SDK's exactly-once conformance suite on the ``sparklink.iceberg`` sink (sqlite SQL
catalog, local warehouse), read back with pyiceberg's scan. The real driver SIGKILL sequence of
this connector family is test_iceberg_kill.py (JSON files streamed into a table)."""

from __future__ import annotations

import pytest

from sparklink.iceberg.sink import IcebergSink
from sparklink.testing.conformance import SinkConformance
from tests.iceberg.iceberg_readers import catalog_options, scan_ids


class TestIcebergSink(SinkConformance):
    format = "sparklink.iceberg"
    sink_factory = IcebergSink
    refuses_second_query = False  # several writers may append to one table (concurrent commits retry)
    connector_points = ("iceberg.after_write", "iceberg.before_commit", "iceberg.after_commit")
    sigkill_points = ()
    task_failure_points = ("writer.after_write", "iceberg.after_write")

    @pytest.fixture
    def sink_options(self, tmp_path):
        return catalog_options(tmp_path / "iceberg")

    def read_ids(self, options):
        return scan_ids(options)
