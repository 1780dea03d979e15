"""The SDK's exactly-once conformance suite on the ``sparklink.iceberg`` sink (sqlite SQL
catalog, local warehouse), read back with pyiceberg's scan. The real driver SIGKILL sequence of
this connector family is test_iceberg_kill.py (JSON files streamed into a table)."""

from __future__ import annotations

import pytest

from sparklink.iceberg.sink import IcebergSink
from sparklink.testing.conformance import SinkConformance
from tests.iceberg.iceberg_readers import catalog_options, scan_ids, sparklink_snapshots


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


class TestIcebergUpsertSink(TestIcebergSink):
    """The same suite on ``writeMode=upsert`` (key ``id``): the staged changes are merged at
    commit. A key applied twice would not show as a duplicate id, so every micro-batch's snapshot
    must also appear once in the ancestry (no batch merged twice)."""

    @pytest.fixture
    def sink_options(self, tmp_path):
        return dict(catalog_options(tmp_path / "iceberg"), writeMode="upsert", keyColumns="id")

    def read_ids(self, options):
        ids = scan_ids(options)
        if ids:
            batches = [(s.get("sparklink.checkpoint-id"), s.get("sparklink.batch-id"))
                       for s in sparklink_snapshots(options)]
            assert len(batches) == len(set(batches)), f"a batch merged twice: {batches}"
        return ids
