"""The exactly-once conformance suite for sources, as an abstract pytest class (test side).

Subclass :class:`SourceConformance` (name starting with ``Test``), say which format to read
and provide a fixture that prepares a fresh input holding ids ``0 .. ROWS-1`` (``id`` column,
each once, at least two micro-batches' worth under the options' read limit)::

    class TestMySource(SourceConformance):
        format = "my.source"
        data_source = "my_package.sources:MySourceDataSource"

        @pytest.fixture
        def source_options(self, tmp_path):
            return {"maxRowsPerTrigger": 100}

The source streams into the exactly-once example directory sink; the driver is SIGKILLed
mid-query (and, separately, every first task attempt fails), the query restarts from its
checkpoint, and every input record must arrive exactly once.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sparklink.testing.conformance.jobs import source_to_directory
from sparklink.testing.conformance.outputs import plain_reader_ids
from sparklink.testing.faults import ENV_BATCH

SOURCE_JOB = "sparklink.testing.conformance.jobs:source_to_directory"
ROWS = 300


class SourceConformance:
    """Abstract exactly-once suite for one source configuration (override the marked members)."""

    #: the name given to ``readStream.format`` (override)
    format: str = ""
    #: ``"module:attribute"`` of the PySpark DataSource class to register in driver processes;
    #: None for formats ``sparklink.register`` registers already
    data_source: str | None = None
    #: the schema DDL given to ``readStream.schema``, for sources that need one
    schema: str | None = None
    #: the test that already runs this very job with failing first task attempts, if one does
    #: (the retried-read test then says so and skips)
    read_retry_covered_by: str = ""
    #: the test that already SIGKILLs a driver running this source inside a sink's commit and
    #: restarts it, if one does (the SIGKILL test then says so and skips)
    sigkill_covered_by: str = ""

    @pytest.fixture
    def source_options(self, tmp_path: Path) -> dict:
        """Prepare a fresh input of ids 0 .. ROWS-1 and return the options reading it (override)."""
        pytest.fail(f"{type(self).__name__} must override the 'source_options' fixture")

    def expected_ids(self) -> list[int]:
        return list(range(ROWS))

    @pytest.fixture
    def source_args(self, source_options, tmp_path) -> dict:
        return {"fmt": self.format, "options": source_options, "schema": self.schema, "out": str(tmp_path / "out"),
                "checkpoint": str(tmp_path / "ck"), "data_source": self.data_source}

    @pytest.mark.slow
    def test_source_survives_sigkill_and_restart(self, source_args, driver, tmp_path, spark):
        """The driver's process group is SIGKILLed inside the commit of micro-batch 1 (after the
        sink's log entry); the restart, in the test's own session, resumes from the checkpoint."""
        if self.sigkill_covered_by:
            pytest.skip(f"the driver running this source is SIGKILLed and restarted in {self.sigkill_covered_by}")
        crashed = driver.run(SOURCE_JOB, source_args, fault="sink.after_log:kill", once_marker=str(tmp_path / "fired"),
                             env={ENV_BATCH: "1"})
        assert crashed.killed, crashed.output
        source_to_directory(spark, **source_args)
        assert plain_reader_ids(Path(source_args["out"])) == self.expected_ids()

    def test_source_read_retried_after_a_task_failure(self, source_args, armed, spark):
        """In the shared session (``local[2,3]``) every task's first attempt fails after its
        read (at the target sink's ``writer.after_write``); the retried reads deliver every
        record once."""
        if self.read_retry_covered_by:
            pytest.skip(f"the same job with failing first attempts runs in {self.read_retry_covered_by}")
        with armed("writer.after_write:raise", attempt=0):
            source_to_directory(spark, **source_args)
        assert plain_reader_ids(Path(source_args["out"])) == self.expected_ids()
