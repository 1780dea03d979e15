"""The ``sparklink.iceberg`` source through the published source conformance suite: a table of
six pyiceberg appends (50 ids each), three data files per micro-batch (two micro-batches), streamed into the
exactly-once directory sink with every task's first attempt failing; every id once. The
suite's SIGKILL case is the family's kill sequence (the source -> the Iceberg sink, three driver
SIGKILLs)."""

from __future__ import annotations

import pytest

from sparklink.testing.conformance import SourceConformance
from sparklink.testing.conformance.sources import ROWS
from tests.iceberg.iceberg_readers import catalog_options
from tests.iceberg.source_tables import append_snapshots


class TestIcebergSource(SourceConformance):
    format = "sparklink.iceberg"
    sigkill_covered_by = ("tests/iceberg/test_iceberg_kill.py "
                          "(test_driver_sigkilled_three_times_mid_stream)")

    @pytest.fixture
    def source_options(self, tmp_path):
        options = catalog_options(tmp_path / "src", "db.events")
        append_snapshots(options, 6, ROWS // 6)
        return {**options, "maxFilesPerTrigger": "3"}
