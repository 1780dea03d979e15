"""PySpark writers that run a :class:`~sparklink.sink.Sink` (the write half of the adapter).

``write`` runs on executors, one call per task; ``commit`` / ``abort`` run on the driver
(in a Python worker the driver's JVM starts). Data arrives as Arrow record batches.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage

from sparklink.faults import fault_point
from sparklink.sink.protocol import commit_batch
from sparklink.sink.recovery import commit_micro_batch, prepare_micro_batch, restore
from sparklink.sink.sink import RestoreContext, Sink
from sparklink.sink.txn import Txn
from sparklink.sink.writer import Committable, WriterContext
from sparklink.spark.checkpoint import BATCH_ID_PROPERTY, QUERY_ID_PROPERTY, RUN_ID_PROPERTY
from sparklink.spark.driver import current_driver
from sparklink.spark.end_of_input import note_end_of_input

LOG = logging.getLogger(__name__)


@dataclass
class SinkCommitMessage(WriterCommitMessage):
    """What one successful task sends to the driver: its committables and where it ran."""

    partition_id: int
    attempt_number: int
    query_id: str | None
    committables: list[Committable] = field(default_factory=list)
    run_id: str | None = None
    lease_epoch: int | None = None  # the sink's lease epoch when the micro-batch was planned


def _task_context(job_id: str, *, streaming: bool) -> WriterContext:
    """Where this task runs (executor). ``streaming`` says which writer runs the task, and only
    a stream's writer (:class:`SinkStreamWriter`) takes Spark's ``streaming.sql.batchId`` and
    query/run ids from the task's local properties. A ``df.write`` (:class:`SinkBatchWriter`) is a
    batch job even when it runs inside ``foreachBatch``, whose tasks inherit the stream's local
    properties (the micro-batch id among them): its context has no batch, query or run id."""
    task = TaskContext.get()
    if task is None:  # not in a Spark task: only in direct unit use
        return WriterContext(partition_id=0, attempt_number=0, task_attempt_id=0, job_id=job_id,
                             batch_id=None, query_id=None)
    batch_id: int | None = None
    query_id: str | None = None
    run_id: str | None = None
    if streaming:
        property_batch = task.getLocalProperty(BATCH_ID_PROPERTY)
        batch_id = int(property_batch) if property_batch is not None else None
        query_id = task.getLocalProperty(QUERY_ID_PROPERTY)
        run_id = task.getLocalProperty(RUN_ID_PROPERTY)
    return WriterContext(
        partition_id=task.partitionId(),
        attempt_number=task.attemptNumber(),
        task_attempt_id=task.taskAttemptId(),
        job_id=job_id,
        batch_id=batch_id,
        query_id=query_id,
        run_id=run_id,
    )


def write_task(sink: Sink, job_id: str, batches: Iterator[pa.RecordBatch], *, streaming: bool) -> SinkCommitMessage:
    """Executor side: stage one task's batches and return its committables."""
    context = _task_context(job_id, streaming=streaming)
    if streaming and context.batch_id is None:
        raise RuntimeError("streaming write task without a 'streaming.sql.batchId' property")
    writer = sink.create_writer(context)
    try:
        for batch in batches:
            if batch.num_rows:
                writer.write_batch(batch)
        writer.flush()
        committables = writer.prepare_commit()
        fault_point("writer.after_write", batch_id=context.batch_id, attempt=context.attempt_number)
    except BaseException:
        writer.abort()
        raise
    finally:
        writer.close()
    return SinkCommitMessage(partition_id=context.partition_id, attempt_number=context.attempt_number,
                             query_id=context.query_id, committables=committables, run_id=context.run_id,
                             lease_epoch=getattr(sink, "lease_epoch", None))


def _committables(messages: list[Any]) -> list[Committable]:
    return [c for m in messages if isinstance(m, SinkCommitMessage) for c in m.committables]


def _query_ids(messages: list[Any]) -> list[str | None]:
    return [m.query_id for m in messages if isinstance(m, SinkCommitMessage)]


def _run_ids(messages: list[Any]) -> list[str | None]:
    return [m.run_id for m in messages if isinstance(m, SinkCommitMessage)]


def _lease_epochs(messages: list[Any]) -> list[int | None]:
    return [m.lease_epoch for m in messages if isinstance(m, SinkCommitMessage)]


class SinkStreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream``: one instance per micro-batch, created on the driver (in the worker
    that plans the micro-batch, and again in the one that commits it). Building it runs the
    sink's per-micro-batch check (:func:`~sparklink.sink.recovery.prepare_micro_batch`)."""

    def __init__(self, sink: Sink, *, query_id: str | None = None):
        self.sink = sink
        self.job_id = uuid.uuid4().hex
        self.query_id = query_id
        prepare_micro_batch(sink, query_id=query_id, driver=current_driver())

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommitMessage:
        return write_task(self.sink, self.job_id, iterator, streaming=True)

    def commit(self, messages: list[Any], batchId: int) -> None:
        fault_point("sink.before_commit", batch_id=batchId)
        commit_micro_batch(self.sink, batchId, self.job_id, _committables(messages), query_ids=_query_ids(messages),
                           run_ids=_run_ids(messages), driver=current_driver(), lease_epochs=_lease_epochs(messages))
        note_end_of_input(self.query_id, self.sink.end_of_input())

    def abort(self, messages: list[Any], batchId: int) -> None:
        self.sink.discard(_committables(messages))


class SinkBatchWriter(DataSourceArrowWriter):
    """``df.write``: one instance per job, created on the driver (Spark pickles it to the tasks
    and to the worker that commits the job). A batch job is a run of its own: building the
    writer restores the sink once, before the job's tasks run."""

    def __init__(self, sink: Sink, txn: Txn | None = None):
        self.sink = sink
        self.job_id = uuid.uuid4().hex
        self.txn = txn
        restore(sink, RestoreContext(query_id=None, run_id=None, reason=f"start of df.write job {self.job_id}"))
        # txnAppId / txnVersion: a pair already committed skips the whole job (sparklink.sink.txn)
        self.skip = txn is not None and sink.txn_committed(txn)
        if self.skip:
            LOG.warning("df.write %s is already committed; skipped", txn)
        else:
            sink.prepare_tasks()

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommitMessage:
        if self.skip:
            context = _task_context(self.job_id, streaming=False)
            return SinkCommitMessage(partition_id=context.partition_id, attempt_number=context.attempt_number,
                                     query_id=None)
        return write_task(self.sink, self.job_id, iterator, streaming=False)

    def commit(self, messages: list[Any]) -> None:
        if self.skip:
            return
        commit_batch(self.sink, None, self.job_id, _committables(messages), txn=self.txn)

    def abort(self, messages: list[Any]) -> None:
        self.sink.abort_job(self.job_id, _committables(messages))
