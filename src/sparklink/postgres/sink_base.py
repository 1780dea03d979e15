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

from sparklink.errors import ConfigError
from sparklink.postgres.changelog_apply import ChangelogApplier
from sparklink.postgres.copy_transport import CopyWriter
from sparklink.postgres.sink_config import PostgresSinkConfig, PostgresSinkOptions
from sparklink.postgres.target_table import ensure_target_table
from sparklink.sink import Sink, SinkWriter, WriterContext
from sparklink.sink.changelog import ChangeSet

LOG = logging.getLogger(__name__)


class PostgresSink(Sink):
    """Base of the four sinks (driver side at construction; pickled to executors)."""

    def __init__(self, options: Mapping[str, str] | None, schema: StructType, config: PostgresSinkConfig | None = None):
        super().__init__(options, schema)
        self.config = config or PostgresSinkConfig.from_options(options)
        self.config.validate_schema(schema)
        stored = self.config.stored_schema(schema)
        self.columns = list(stored.names)
        self.changelog_applier: ChangelogApplier | None = None
        with self.config.connection.connect() as conn:
            try:
                self.column_types = ensure_target_table(conn, self.config.table, stored, self.config.key_columns,
                                                        create=self.config.create_table)
                if self.config.keyed and not has_unique_index(conn, str(self.config.table), self.config.key_columns):
                    raise ConfigError(PostgresSinkOptions.key_columns.key,
                                      f"table {self.config.table} has no primary key or unique index on exactly "
                                      f"({', '.join(self.config.key_columns)}); ON CONFLICT needs one")
                if self.config.changelog is not None:
                    self.changelog_applier = ChangelogApplier(self.config.table, self.config.changelog, self.columns,
                                                              self.column_types)
                self.prepare_target(conn)
            except psycopg.Error as exc:
                raise self.config.connection.error(f"preparing table {self.config.table}", exc) from None

    def prepare_target(self, conn: psycopg.Connection) -> None:
        """Sink-specific checks and recovery at query start (driver side)."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(table={self.config.table}, {self.config.connection!r})"


def has_unique_index(conn: psycopg.Connection, table: str, columns: tuple[str, ...]) -> bool:
    """True if ``table`` has a unique index (or primary key) on exactly ``columns``."""
    rows = conn.execute(
        "SELECT array_agg(a.attname::text ORDER BY a.attname) FROM pg_index i "
        "JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) "
        "WHERE i.indrelid = to_regclass(%s) AND i.indisunique AND i.indpred IS NULL GROUP BY i.indexrelid",
        (table,)).fetchall()
    wanted = sorted(columns)
    return any(sorted(r[0]) == wanted for r in rows)


class CopyingWriter(SinkWriter):
    """Executor side: one connection and one transaction per task, rows sent with COPY.

    Subclasses say where the COPY goes (:meth:`copy_target`, after :meth:`begin`) and what
    :meth:`prepare_commit` does with the transaction.

    With ``writeMode=upsert`` the task's record batches are kept (Arrow, in memory) instead of
    sent, and :meth:`apply_changes` reduces them to one change per key and applies them in the
    task's transaction (:mod:`sparklink.postgres.changelog_apply`) before the subclass commits it
    (``two-phase`` only stages them: :class:`~sparklink.postgres.two_phase_sink.TwoPhaseWriter`). A key's changes must then all be in one task of a micro-batch (partition the
    DataFrame by key), as with Flink's upsert sinks.
    """

    def __init__(self, sink: PostgresSink, context: WriterContext):
        self.config = sink.config
        self.columns = sink.columns
        self.column_types = sink.column_types
        self.context = context
        self.conn: psycopg.Connection | None = None
        self.copy: CopyWriter | None = None
        self.rows = 0
        self.applier = sink.changelog_applier
        self.changes: list[pa.RecordBatch] = []
        self.accepting = False  # the task's rows are wanted (not a replay of a committed batch)

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
                self.accepting = True
                if self.applier is None:
                    self.begin(self.conn)
                    self.copy = CopyWriter(self.conn.cursor(), self.copy_target(), self.columns, self.column_types)
            except psycopg.Error as exc:
                raise self.config.connection.error(f"starting the write to {self.config.table}", exc) from None
        if self.applier is not None:
            if self.accepting:
                self.changes.append(batch)
                self.rows += batch.num_rows
            return
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

    @property
    def has_rows(self) -> bool:
        """True when this task has rows to commit (none for a replay of a committed batch)."""
        return self.conn is not None and (self.copy is not None or (self.applier is not None and self.accepting))

    def reduced_changes(self) -> ChangeSet | None:
        """``writeMode=upsert``: the task's changes reduced to one per key (taken from the
        writer: a second call answers None); None in append mode or without changes."""
        if self.applier is None or not self.changes:
            return None
        changes = self.applier.changelog.reduce(pa.Table.from_batches(self.changes))
        self.changes = []
        return changes

    def apply_changes(self) -> None:
        """``writeMode=upsert``: reduce the task's changes to one per key and apply them in the
        task's transaction (not committed). No-op in append mode."""
        changes = self.reduced_changes()
        if changes is None:
            return
        assert self.applier is not None and self.conn is not None  # changes kept by the first batch
        try:
            self.applier.apply(self.conn, changes)
        except psycopg.Error as exc:
            raise self.config.connection.error(f"applying changes to {self.config.table}", exc) from None

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

