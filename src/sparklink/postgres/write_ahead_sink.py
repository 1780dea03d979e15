"""``semantic=write-ahead``: Flink's GenericWriteAheadSink with a CheckpointCommitter table.

1. *Executor, per task*: the rows are written durably to the write-ahead log, an Arrow IPC
   file under ``<checkpointLocation>/sparklink/wal/<batch>/`` (fsync'd); its path is the
   committable. Nothing reaches PostgreSQL yet.
2. *Driver, once the batch is logged*: one transaction COPYs every WAL file of the batch into
   the target and inserts one marker row per file into ``sparklink_commit_markers`` (the
   checkpoint committer), then commits. A crash before COMMIT leaves nothing; the roll-forward
   sees no marker and sends again. A crash after COMMIT leaves markers; the roll-forward sees
   them and skips. So for a PostgreSQL target, marker and rows in one transaction, this is
   exactly-once. (Flink's WAL sink is at-least-once because its committer is a separate
   system; the same holds here if the marker table were elsewhere.)
3. *Post-commit*: WAL files are deleted.

With ``writeMode=upsert`` the committer reads every WAL file of the batch, reduces the whole
batch to one change per key (so, unlike the per-task semantics, a key's changes may be in any
partition) and applies it (:mod:`sparklink.postgres.changelog_apply`) in the same transaction
as the markers.

The checkpoint location must be a file system both the executors and the driver see (local
mode, NFS). Sending happens on the driver: writes are spiky (section 8.4.2) and bounded by one
connection's COPY speed.
"""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path
from typing import BinaryIO

import psycopg
import pyarrow as pa
import pyarrow.ipc as ipc

from sparklink.errors import CommitError
from sparklink.faults import fault_point
from sparklink.postgres.commit_markers import ensure_marker_table, insert_marker, marker_exists, prune_markers
from sparklink.postgres.copy_transport import CopyWriter
from sparklink.postgres.sink_base import PostgresSink
from sparklink.sink import CommitRequest, Committable, Committer, SinkWriter, WriterContext

COMMITTABLE_VERSION = 1
WAL_DIR = "wal"


class WriteAheadWriter(SinkWriter):
    """Executor side: appends the task's record batches to one WAL file."""

    def __init__(self, sink: "WriteAheadSink", context: WriterContext):
        self.root = sink.wal_root
        self.context = context
        self.sink_id = sink.config.sink_id
        key = str(context.batch_id) if context.batch_id is not None else f"job-{context.job_id}"
        self.batch_key = key
        name = f"{context.partition_id:05d}-{context.attempt_number}-{uuid.uuid4().hex[:12]}.arrow"
        self.path = self.root / key / name
        self._file: BinaryIO | None = None
        self._writer: ipc.RecordBatchStreamWriter | None = None
        self.rows = 0

    def write_batch(self, batch: pa.RecordBatch) -> None:
        if self._writer is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(self.path, "wb")  # noqa: SIM115 - closed in flush/abort/close
            self._writer = ipc.new_stream(self._file, batch.schema)
        self._writer.write_batch(batch)
        self.rows += batch.num_rows

    def flush(self) -> None:
        if self._writer is not None:
            self._writer.close()
            assert self._file is not None  # opened with the writer
            self._file.flush()
            os.fsync(self._file.fileno())
            self._file.close()
            self._writer = None

    def prepare_commit(self) -> list[Committable]:
        if self.rows == 0:
            return []
        return [{"v": COMMITTABLE_VERSION, "file": str(self.path.relative_to(self.root)), "rows": self.rows,
                 "partition": self.context.partition_id, "batch": self.batch_key}]

    def abort(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        if self._file is not None and not self._file.closed:
            self._file.close()


def read_wal_file(path: Path):
    """The record batches of one WAL file (driver side, at commit)."""
    try:
        with open(path, "rb") as handle:
            reader = ipc.open_stream(handle)
            yield from reader
    except FileNotFoundError:
        raise CommitError(f"write-ahead log file {path} is missing; its rows cannot be sent") from None
    except pa.ArrowInvalid as exc:
        raise CommitError(f"write-ahead log file {path} is corrupt: {exc}") from None


class WriteAheadCommitter(Committer):
    """Driver side: send every WAL file of a batch plus its markers in one transaction."""

    def __init__(self, sink: "WriteAheadSink"):
        self.sink = sink
        self.config = sink.config

    def commit(self, requests: list[CommitRequest]) -> None:
        if not requests:
            return
        table = self.config.table
        with self.config.connection.connect() as conn:
            try:
                first = requests[0].committable
                if marker_exists(conn, table, sink_id=self.config.sink_id, txn=_txn(first)):
                    for request in requests:  # one transaction per batch: all are in, or none
                        request.signal_already_committed()
                    return
                if self.sink.changelog_applier is not None:
                    self._apply_changes(conn, requests)
                else:
                    self._copy(conn, requests)
                for request in requests:
                    c = request.committable
                    insert_marker(conn, table, sink_id=self.config.sink_id, batch_key=c["batch"],
                                  part=c["partition"], txn=_txn(c), row_count=c["rows"])
                fault_point("postgres.before_wal_commit", batch_id=requests[0].batch_id)
                conn.commit()
            except psycopg.Error as exc:
                raise self.config.connection.error(f"sending the write-ahead log into {table}", exc) from None


    def _copy(self, conn: psycopg.Connection, requests: list[CommitRequest]) -> None:
        copy = CopyWriter(conn.cursor(), self.config.table.identifier, self.sink.columns, self.sink.column_types)
        try:
            for request in requests:
                for batch in read_wal_file(self.sink.wal_root / request.committable["file"]):
                    copy.write(batch)
            copy.finish()
        except BaseException as exc:
            copy.cancel(exc)
            raise

    def _apply_changes(self, conn: psycopg.Connection, requests: list[CommitRequest]) -> None:
        """``writeMode=upsert``: the whole batch's changes, in the batch's order (partition, then
        row), reduced to one per key and applied in this transaction."""
        applier = self.sink.changelog_applier
        assert applier is not None  # writeMode=upsert
        ordered = sorted(requests, key=lambda r: (r.committable["partition"], r.committable["file"]))
        batches = [batch for request in ordered
                   for batch in read_wal_file(self.sink.wal_root / request.committable["file"])]
        if batches:
            applier.apply(conn, applier.changelog.reduce(pa.Table.from_batches(batches)))


def _txn(committable: Committable) -> str:
    return f"wal:{committable['batch']}:{committable['file']}"


class WriteAheadSink(PostgresSink):
    @property
    def wal_root(self) -> Path:
        assert self.config.checkpoint_location is not None
        return Path(self.config.checkpoint_location) / "sparklink" / WAL_DIR

    def create_writer(self, context: WriterContext) -> WriteAheadWriter:
        return WriteAheadWriter(self, context)

    def create_committer(self) -> WriteAheadCommitter:
        return WriteAheadCommitter(self)

    def prepare_target(self, conn: psycopg.Connection) -> None:
        ensure_marker_table(conn, self.config.table)

    def discard(self, committables: list[Committable]) -> None:
        for committable in committables:
            (self.wal_root / committable["file"]).unlink(missing_ok=True)

    def post_commit(self, batch_id: int | None, committables: list[Committable]) -> None:
        if batch_id is not None:
            # one batch at a time: every WAL file left is sent or an orphan of a failed attempt
            shutil.rmtree(self.wal_root, ignore_errors=True)
            with self.config.connection.connect() as conn:
                try:
                    prune_markers(conn, self.config.table, sink_id=self.config.sink_id,
                                  before_batch=batch_id - self.commit_log_retention() + 1)
                except psycopg.Error as exc:
                    raise self.config.connection.error("pruning old commit markers", exc) from None
        else:
            for key in {c["batch"] for c in committables}:
                shutil.rmtree(self.wal_root / key, ignore_errors=True)
