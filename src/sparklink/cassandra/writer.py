"""The writers of the ``sparklink.cassandra`` sink (executor side, one per Spark task).

* :class:`UpsertWriter` (``semantic=upsert``): sends the task's rows straight to the table as
  prepared INSERTs (:mod:`sparklink.cassandra.sender`); everything is acknowledged before the
  task reports success. A retried task or a replayed micro-batch writes the same keys again.
  With ``writeMode=upsert`` the task's record batches are kept and, at flush, reduced to one
  change per key and sent as INSERTs and DELETEs (:meth:`CassandraSink.change_statements`); a
  key's changes must then be in one task of a micro-batch (partition by key).
* :class:`StagingWriter` (``semantic=write-ahead``): writes nothing to Cassandra. The task's
  record batches go, as Arrow IPC streams (LZ4), to the checkpoint's storage through the
  storage seam (:mod:`sparklink.storage`: local disk or S3), in segments of at most
  ``SEGMENT_BYTES``; the segments' keys are the committable. The driver's commit sends them.

Both refuse a null primary-key value before the record batch that holds it is sent or staged.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.ipc as ipc

from sparklink.cassandra.config import CassandraSinkConfig
from sparklink.cassandra.connection import driver_errors, shared_session
from sparklink.cassandra.sender import RequestWindow, RowStatements
from sparklink.cassandra.target_table import TargetTable, null_key_error
from sparklink.sink import Committable, SinkWriter, WriterContext
from sparklink.storage import FileStorage


class TargetSink(Protocol):
    """What a writer needs of its sink (:class:`~sparklink.cassandra.sink.CassandraSink`)."""

    config: CassandraSinkConfig
    table: TargetTable
    key_fields: list[str]

    def row_statements(self, session: Any) -> RowStatements: ...

    def change_statements(self, session: Any, changes: pa.Table) -> Iterator[Any]: ...


class StagingSink(TargetSink, Protocol):
    """... and of a write-ahead sink (:class:`~sparklink.cassandra.sink.WriteAheadSink`)."""

    def staging_storage(self) -> FileStorage: ...

COMMITTABLE_VERSION = 1
SEGMENT_BYTES = 64 * 1024 * 1024  # a staged segment is written whole from memory, then the next begins
WAL_PREFIX = "sparklink/wal"  # staged segments: <WAL_PREFIX>/<batch key>.<task attempt>-<n>.arrow (one directory)


def staged_batch(key: str) -> str:
    """The batch key of a staged segment's storage key (or of a temporary file the storage
    left beside it: ``.<name>.<random>.tmp``)."""
    return key.rpartition("/")[2].lstrip(".").partition(".")[0]


def batch_key(context: WriterContext) -> str:
    """The micro-batch id, or ``job-<id>`` for a ``df.write``."""
    return str(context.batch_id) if context.batch_id is not None else f"job-{context.job_id}"


class UpsertWriter(SinkWriter):
    """Executor side: INSERT every row, at most ``maxConcurrentRequests`` in flight."""

    def __init__(self, sink: TargetSink, context: WriterContext):
        self.sink = sink
        self.config = sink.config
        self.context = context
        self.window: RequestWindow | None = None
        self.statements: RowStatements | None = None
        self.rows = 0
        self.changes: list[pa.RecordBatch] | None = [] if self.config.changelog is not None else None

    def _open(self) -> tuple[RowStatements, RequestWindow]:
        if self.statements is None or self.window is None:
            settings = self.config.connection
            session = shared_session(settings)
            try:
                self.statements = self.sink.row_statements(session)
            except driver_errors() as exc:
                raise settings.error(f"preparing the INSERT into {self.sink.table}", exc) from None
            self.window = RequestWindow(session, settings, limit=self.config.max_concurrent_requests,
                                        max_retries=self.config.max_retries, doing=f"writing to {self.sink.table}")
        return self.statements, self.window

    def write_batch(self, batch: pa.RecordBatch) -> None:
        error = null_key_error(batch, self.sink.key_fields, str(self.sink.table))
        if error is not None:
            raise error
        if self.changes is not None:  # writeMode=upsert: reduced and sent at flush
            self.changes.append(batch)
            self.rows += batch.num_rows
            return
        statements, window = self._open()
        for statement in statements.statements(batch):
            window.send(statement)
        self.rows += batch.num_rows

    def flush(self) -> None:
        if self.changes:
            _, window = self._open()
            changes, self.changes = pa.Table.from_batches(self.changes), []
            for statement in self.sink.change_statements(shared_session(self.config.connection), changes):
                window.send(statement)
        if self.window is not None:
            self.window.finish()

    def prepare_commit(self) -> list[Committable]:
        if self.rows == 0:
            return []
        return [{"v": COMMITTABLE_VERSION, "rows": self.rows, "partition": self.context.partition_id}]


class StagingWriter(SinkWriter):
    """Executor side: the task's record batches as Arrow IPC segments in the checkpoint's storage."""

    def __init__(self, sink: StagingSink, context: WriterContext):
        self.sink = sink
        self.context = context
        self.batch = batch_key(context)
        self.name = f"{context.partition_id:05d}-{context.attempt_number}-{uuid.uuid4().hex[:12]}"
        self.storage: FileStorage | None = None
        self.segments: list[str] = []
        self._buffer: pa.BufferOutputStream | None = None
        self._writer: ipc.RecordBatchStreamWriter | None = None
        self.rows = 0

    def write_batch(self, batch: pa.RecordBatch) -> None:
        error = null_key_error(batch, self.sink.key_fields, str(self.sink.table))
        if error is not None:
            raise error
        if self._writer is None:
            self._buffer = pa.BufferOutputStream()
            self._writer = ipc.new_stream(self._buffer, batch.schema,
                                          options=ipc.IpcWriteOptions(compression="lz4"))
        self._writer.write_batch(batch)
        self.rows += batch.num_rows
        assert self._buffer is not None  # opened with the writer
        if self._buffer.tell() >= SEGMENT_BYTES:
            self._put_segment()

    def _put_segment(self) -> None:
        """Write the open segment whole to storage (durable when ``put`` returns)."""
        if self._writer is None or self._buffer is None:
            return
        self._writer.close()
        data = self._buffer.getvalue()
        self._writer = self._buffer = None
        if self.storage is None:
            self.storage = self.sink.staging_storage()
        key = f"{WAL_PREFIX}/{self.batch}.{self.name}-{len(self.segments):04d}.arrow"
        self.segments.append(key)  # listed before the write, so that an abort removes a partial one too
        self.storage.put(key, data.to_pybytes())

    def flush(self) -> None:
        self._put_segment()

    def prepare_commit(self) -> list[Committable]:
        if self.rows == 0:
            return []
        return [{"v": COMMITTABLE_VERSION, "batch": self.batch, "partition": self.context.partition_id,
                 "segments": list(self.segments), "rows": self.rows}]

    def abort(self) -> None:
        if self._writer is not None:
            self._writer = self._buffer = None
        if self.segments:
            storage = self.storage if self.storage is not None else self.sink.staging_storage()
            for key in self.segments:
                storage.delete(key)
