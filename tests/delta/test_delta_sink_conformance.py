"""The Delta sink through the published conformance suite (sparklink.testing.conformance): a
simulated crash at every SDK and ``delta.*`` fault point, tasks failing on their first attempt,
two attempts of one task, replayed and out-of-order commits. Every table is read back with
delta-rs. The real driver SIGKILL sequence of this connector runs in test_delta_sink_kills.py."""

from __future__ import annotations

import pytest

from sparklink.delta.sink import DeltaSink
from sparklink.testing.conformance import SinkConformance
from tests.delta.readers import delta_ids, unreferenced_files

DELTA_POINTS = ("delta.writer.after_files", "delta.before_commit", "delta.after_commit", "delta.before_cleanup")


class TestDeltaSink(SinkConformance):
    format = "sparklink.delta"
    sink_factory = DeltaSink
    connector_points = DELTA_POINTS
    sigkill_points = ()  # the real SIGKILL sequence: test_delta_sink_kills.py
    task_failure_points = ("writer.after_write", "delta.writer.after_files")
    refuses_second_query = False  # a Delta table takes appends from several queries (test_delta_sink.py)

    @pytest.fixture
    def sink_options(self, tmp_path):
        return {"path": str(tmp_path / "table")}

    def read_ids(self, options):
        return delta_ids(options["path"])

    def leftovers(self, options):
        return unreferenced_files(options["path"])


class TestPartitionedDeltaSink(TestDeltaSink):
    """The same with a partition column (the ``split`` column: one directory per task)."""

    @pytest.fixture
    def sink_options(self, tmp_path):
        return {"path": str(tmp_path / "table"), "partitionColumns": "split"}

    def test_task_failing_on_its_first_attempt(self):
        pytest.skip("the unpartitioned case runs it; partitioned tasks fail the same way (test_delta_sink_kills.py "
                    "streams a partitioned table)")
