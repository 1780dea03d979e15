"""The sink lifecycle (sparklink.sink.recovery), driven as Spark's adapter drives it, on the
example directory sink (real files): restore runs once per query run, keyed on the run id the
tasks report, and before the tasks when the per-micro-batch check finds a problem."""

from __future__ import annotations

import pytest

from sparklink.examples.directory_sink import DirectorySink
from sparklink.examples.sequence_source import SCHEMA
from sparklink.sink import CommitLog
from sparklink.sink.commit_log import STATE_COMMITTING, CommitLogEntry
from sparklink.spark.sink_adapter import SinkCommitMessage, SinkStreamWriter
from tests.sink.test_protocol import stage, visible_ids


class CountingSink(DirectorySink):
    """The example directory sink, recording why each restore ran (in a list shared by the
    sink objects of one test, as Spark builds one per micro-batch)."""

    restores: list[str] = []

    def restore(self, context):
        type(self).restores.append(context.reason if context.run_id is None else f"run {context.run_id}")


@pytest.fixture
def options(tmp_path):
    CountingSink.restores = []
    return {"path": str(tmp_path / "out"), "checkpointLocation": str(tmp_path / "ck")}


def micro_batch(options, batch_id: int, run_id: str) -> None:
    """Planning (a stream writer built), one task, then the commit worker's writer commits."""
    planned = SinkStreamWriter(CountingSink(options, SCHEMA), query_id="q1")
    committables = stage(planned.sink, batch_id, 0, [batch_id])
    message = SinkCommitMessage(partition_id=0, attempt_number=0, query_id="q1", committables=committables,
                                run_id=run_id)
    SinkStreamWriter(CountingSink(options, SCHEMA), query_id="q1").commit([message], batch_id)


def test_restore_runs_once_per_run_not_per_micro_batch(options):
    for batch in range(3):
        micro_batch(options, batch, "run-a")
    for batch in range(3, 5):
        micro_batch(options, batch, "run-b")
    assert CountingSink.restores == ["run run-a", "run run-b"]
    log = CommitLog(CountingSink(options, SCHEMA).commit_log_dir())
    assert [log.get(str(b)).extra["runId"] for b in range(5)] == ["run-a"] * 3 + ["run-b"] * 2
    assert visible_ids(options["path"]) == [0, 1, 2, 3, 4]


def test_a_commit_left_open_is_restored_before_the_tasks_of_the_next_micro_batch(options):
    micro_batch(options, 0, "run-a")
    sink = CountingSink(options, SCHEMA)
    open_entry = CommitLogEntry(key="1", batch_id=1, state=STATE_COMMITTING,
                                committables=stage(sink, 1, 0, [1], job="crashed"))
    CommitLog(sink.commit_log_dir()).put(open_entry)  # the driver died inside commit 1
    SinkStreamWriter(CountingSink(options, SCHEMA), query_id="q1")  # planning of micro-batch 2
    assert CountingSink.restores == ["run run-a", "commit 1 was left unfinished"]
    assert CommitLog(sink.commit_log_dir()).get("1").finished
    assert visible_ids(options["path"]) == [0, 1]
