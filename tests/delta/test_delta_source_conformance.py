"""The ``sparklink.delta`` source through the published conformance suite: a table written by
delta-rs, read from ``startingVersion=0`` (the versions' added files; the initial snapshot's
offsets run in the kill sequence) into the directory sink with every first task attempt
failing; pyarrow reads every id once."""

from __future__ import annotations

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from sparklink.testing.conformance import SourceConformance
from sparklink.testing.conformance.sources import ROWS

VERSIONS = 3


class TestDeltaSource(SourceConformance):
    format = "sparklink.delta"
    sigkill_covered_by = ("tests/delta/test_delta_sink_kills.py (the source's initial snapshot and later versions "
                          "into the Delta sink, three driver SIGKILLs)")

    @pytest.fixture
    def source_options(self, tmp_path):
        table = tmp_path / "table"
        step = ROWS // VERSIONS
        for start in range(0, ROWS, step):
            ids = pa.array(range(start, start + step), pa.int64())
            write_deltalake(str(table), pa.table({"id": ids, "split": pa.compute.cast(ids, pa.int32())}), mode="append")
        return {"path": str(table), "startingVersion": "0", "maxFilesPerTrigger": "1"}
