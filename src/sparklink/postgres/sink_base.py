"""What every ``sparklink.postgres`` sink shares: driver-side set-up and the COPY writer.

The sink object is built on the driver for every micro-batch (PySpark creates a new data
source each time), validates options and prepares the target there, and is pickled to the
executors, where :class:`CopyingWriter` streams a task's Arrow batches through one COPY.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

import psycopg
import pyarrow as pa
from psycopg import sql
from pyspark.sql.types import StructType

from sparklink.postgres.copy_transport import CopyWriter
from sparklink.postgres.sink_config import PostgresSinkConfig
from sparklink.postgres.target_table import ensure_target_table
from sparklink.sink import Sink, SinkWriter, WriterContext

LOG = logging.getLogger(__name__)


class PostgresSink(Sink):
    """Base of the four sinks (driver side at construction; pickled to executors)."""

    def __init__(self, options: Mapping[str, str] | None, schema: StructType, config: PostgresSinkConfig | None = None):
        super().__init__(options, schema)
        self.config = config or PostgresSinkConfig.from_options(options)
        self.config.validate_schema(schema)
        self.columns = list(schema.names)
        with self.config.connection.connect() as conn:
            try:
                self.column_types = ensure_target_table(conn, self.config.table, schema, self.config.key_columns,
                                                        create=self.config.create_table)
                self.prepare_target(conn)
            except psycopg.Error as exc:
                raise self.config.connection.error(f"preparing table {self.config.table}", exc) from None

    def prepare_target(self, conn: psycopg.Connection) -> None:
        """Sink-specific checks and recovery at query start (driver side)."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(table={self.config.table}, {self.config.connection!r})"


class CopyingWriter(SinkWriter):
    """Executor side: one connection and one transaction per task, rows sent with COPY.

    Subclasses say where the COPY goes (:meth:`copy_target`, after :meth:`begin`) and what
    :meth:`prepare_commit` does with the transaction.
    """

    def __init__(self, sink: PostgresSink, context: WriterContext):
        self.config = sink.config
        self.columns = sink.columns
        self.column_types = sink.column_types
        self.context = context
        self.conn: psycopg.Connection | None = None
        self.copy: CopyWriter | None = None
        self.rows = 0

    @property
    def batch_key(self) -> str:
        if self.context.batch_id is not None:
            return str(self.context.batch_id)
        return f"job-{self.context.job_id}"

    def begin(self, conn: psycopg.Connection) -> None:
        """Called once, on the first record batch, inside the task's transaction."""

    def copy_target(self) -> sql.Composable:
        return self.config.table.identifier

    def accepts_rows(self) -> bool:
        """False to drop the task's rows (a replay of a batch that is already committed)."""
        return True

    def write_batch(self, batch: pa.RecordBatch) -> None:
        if self.conn is None:
            self.conn = self.config.connection.connect()
            try:
                if not self.accepts_rows():
                    self.copy = None
                    return
                self.begin(self.conn)
                self.copy = CopyWriter(self.conn.cursor(), self.copy_target(), self.columns, self.column_types)
            except psycopg.Error as exc:
                raise self.config.connection.error(f"starting the write to {self.config.table}", exc) from None
        if self.copy is None:
            return
        try:
            self.send(batch)
        except psycopg.Error as exc:
            raise self.config.connection.error(f"COPY into {self.config.table}", exc) from None
        self.rows += batch.num_rows

    def send(self, batch: pa.RecordBatch) -> None:
        """Send one record batch through the open COPY (subclasses may route it elsewhere)."""
        assert self.copy is not None  # write_batch sends only through an open COPY
        self.copy.write(batch)

    def flush(self) -> None:
        if self.copy is not None:
            try:
                self.copy.finish()
            except psycopg.Error as exc:
                raise self.config.connection.error(f"COPY into {self.config.table}", exc) from None

    def abort(self) -> None:
        if self.copy is not None:
            self.copy.cancel(RuntimeError("task aborted"))
        if self.conn is not None and not self.conn.closed:
            try:
                self.conn.rollback()
            except psycopg.Error as exc:
                LOG.warning("rollback after a failed task: %s", self.config.connection.scrub(str(exc)))

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None

