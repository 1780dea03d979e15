"""The ``sparklink.cassandra`` sink: :func:`CassandraSinkConnector` picks the sink by ``semantic``.

Driver side: PySpark builds the sink for every write and every micro-batch with the user's
options and the DataFrame's schema. Building it checks everything that can be checked before
a row is written (options, the table, its columns and primary key, the types) and is then
pickled to the executors (settings only; sessions are opened where they are used, and kept
per process by :func:`~sparklink.cassandra.connection.shared_session`).

* :class:`UpsertSink` (``semantic=upsert``, the default; Flink's Cassandra sink without the
  write-ahead log): tasks INSERT by primary key; the streaming commit log in the checkpoint
  skips replays of committed micro-batches, and a replayed uncommitted one rewrites the same
  keys. Eventually exactly-once for deterministic input: a reader may see a key's older value
  again while a batch is replayed after a recovery.
* :class:`WriteAheadSink` (``semantic=write-ahead``; Flink's ``GenericWriteAheadSink`` with a
  ``CheckpointCommitter``): tasks stage, the driver's commit writes and records (see
  :mod:`sparklink.cassandra.committer`). Rows reach Cassandra only from a batch Spark has
  committed to write, once, even when the job's output is not deterministic.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa
from pyspark.sql.types import IntegerType, LongType, ShortType, StructType

from sparklink.cassandra.commit_table import batch_recorded, ensure_commit_table, forget_batches, record_batch
from sparklink.cassandra.committer import NoOpCommitter, WriteAheadCommitter
from sparklink.cassandra.config import (
    SEMANTIC_UPSERT,
    SEMANTIC_WRITE_AHEAD,
    CassandraSinkConfig,
    CassandraSinkOptions,
)
from sparklink.cassandra.connection import driver_errors, shared_session
from sparklink.cassandra.sender import DeleteStatements, RowStatements
from sparklink.cassandra.target_table import TargetTable, keyspace_exists, load_target_table
from sparklink.cassandra.writer import WAL_PREFIX, StagingWriter, UpsertWriter, staged_batch
from sparklink.errors import ConfigError
from sparklink.sink import Committable, Committer, Sink, SinkWriter, WriterContext
from sparklink.sink.changelog import Changelog, ChangelogOptions
from sparklink.sink.txn import Txn
from sparklink.storage import FileStorage, LocalLocation, Location, open_storage, parse_location

O = CassandraSinkOptions


class CassandraSink(Sink):
    """What both semantics share (built on the driver; pickled to executors)."""

    def __init__(self, options: Mapping[str, str] | None, schema: StructType, config: CassandraSinkConfig | None = None):
        super().__init__(options, schema)
        self.config = config or CassandraSinkConfig.from_options(options)
        settings = self.config.connection
        session = shared_session(settings)
        try:
            table = load_target_table(session, self.config.keyspace, self.config.table)
            if table is None and not keyspace_exists(session, self.config.keyspace):
                raise ConfigError(O.keyspace.key, f"keyspace '{self.config.keyspace}' does not exist on "
                                  f"{settings.describe()}")
            if table is None:
                raise ConfigError(O.table.key, f"table {self.config.target} does not exist on {settings.describe()}; "
                                  "create it first (its primary key decides what an upsert replaces)")
        except driver_errors() as exc:
            raise settings.error(f"reading the schema of {self.config.target}", exc) from None
        self.table: TargetTable = table
        self.changelog = self.config.changelog
        stored = schema
        if self.changelog is not None:
            self.changelog.check_columns(schema.names)
            stored = StructType([f for f in schema.fields if f.name != self.changelog.op_column])
        self.fields = list(stored.names)
        self.columns = table.bind(stored)
        self.key_fields = [self.fields[self.columns.index(k)] for k in table.primary_key]
        if self.changelog is not None:
            check_changelog(self.changelog, stored, self.key_fields, table)
        try:
            self.prepare_target(session)
        except driver_errors() as exc:
            raise settings.error(f"preparing {self.config.commit_keyspace}.{self.config.commit_table}", exc) from None

    @classmethod
    def validate(cls, options: Mapping[str, str] | None, schema: StructType) -> None:
        CassandraSinkConfig.from_options(options)

    def prepare_target(self, session: Any) -> None:
        """Sink-specific set-up on the driver when a write starts (the commit table)."""

    def row_statements(self, session: Any) -> RowStatements:
        """The prepared INSERT of this DataFrame's columns (where the rows are sent)."""
        timestamps = self.changelog.sequence_column if self.changelog is not None else None
        return RowStatements(session, self.table, self.fields, self.columns, self.config.batch_rows,
                             timestamp_field=timestamps)

    def change_statements(self, session: Any, changes: pa.Table) -> Iterator[Any]:
        """``writeMode=upsert``: ``changes`` (rows of one task, or of a whole batch for
        write-ahead, in order) reduced to one per key: INSERTs of the upserts, DELETEs of the
        deletes (executor or driver side)."""
        assert self.changelog is not None  # writeMode=upsert
        reduced = self.changelog.reduce(changes)
        upserts = reduced.upserts()
        if upserts.num_rows:
            statements = self.row_statements(session)
            for batch in upserts.to_batches():
                yield from statements.statements(batch)
        deletes = reduced.delete_keys()
        if deletes.num_rows:
            yield from DeleteStatements(session, self.table, self.key_fields,
                                        self.changelog.sequence_column).statements(deletes)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(table={self.config.target}, {self.config.connection!r})"


class UpsertSink(CassandraSink):
    def create_writer(self, context: WriterContext) -> SinkWriter:
        return UpsertWriter(self, context)

    def create_committer(self) -> Committer:
        return NoOpCommitter()

    def txn_committed(self, txn: Txn) -> bool:
        """``txnAppId`` / ``txnVersion``: with a checkpoint the commit log records the pair (the
        SDK's default); without one, a row of the commit table does (:meth:`record_txn`)."""
        if self.commit_log_dir() is not None:
            return super().txn_committed(txn)
        session = self._commit_table_session()
        try:
            return batch_recorded(session, self.config.commit_keyspace, self.config.commit_table,
                                  sink_id=self.config.sink_id, batch_key=txn.job_id)
        except driver_errors() as exc:
            raise self.config.connection.error(f"reading {self.config.commit_table}", exc) from None

    def record_txn(self, txn: Txn) -> None:
        """After the job's tasks wrote (no checkpoint): the pair's row. A crash between the two
        makes the replayed write upsert the same rows again, then record the pair."""
        session = self._commit_table_session()
        try:
            record_batch(session, self.config.commit_keyspace, self.config.commit_table, sink_id=self.config.sink_id,
                         batch_key=txn.job_id, row_count=0)
        except driver_errors() as exc:
            raise self.config.connection.error(f"recording {txn} in {self.config.commit_table}", exc) from None

    def _commit_table_session(self) -> Any:
        session = shared_session(self.config.connection)
        try:
            ensure_commit_table(session, self.config.commit_keyspace, self.config.commit_table)
        except driver_errors() as exc:
            raise self.config.connection.error(f"creating {self.config.commit_table}", exc) from None
        return session


class WriteAheadSink(CassandraSink):
    def __init__(self, options: Mapping[str, str] | None, schema: StructType, config: CassandraSinkConfig | None = None):
        super().__init__(options, schema, config)
        assert self.config.checkpoint_location is not None  # the config requires it for write-ahead
        location = parse_location(O.checkpoint_location.key, self.config.checkpoint_location)
        if isinstance(location, LocalLocation):
            location = LocalLocation(path=os.path.abspath(location.path))
        self.staging_location: Location = location

    def prepare_target(self, session: Any) -> None:
        ensure_commit_table(session, self.config.commit_keyspace, self.config.commit_table)

    def staging_storage(self) -> FileStorage:
        """The checkpoint's storage, where tasks stage their rows (opened where it is used)."""
        return open_storage(self.staging_location)

    def create_writer(self, context: WriterContext) -> SinkWriter:
        return StagingWriter(self, context)

    def create_committer(self) -> Committer:
        return WriteAheadCommitter(self)

    def discard(self, committables: list[Committable]) -> None:
        storage = self.staging_storage()
        for committable in committables:
            for key in committable.get("segments", ()):
                storage.delete(key)

    def post_commit(self, batch_id: int | None, committables: list[Committable]) -> None:
        """Remove the staged segments of this batch, of every older one (attempts that failed
        or were abandoned by a crash) and the commit table's rows past the log's retention."""
        storage = self.staging_storage()
        jobs = {c["batch"] for c in committables}
        for info in list(storage.list(WAL_PREFIX + "/")):
            batch = staged_batch(info.key)
            if batch in jobs or (batch_id is not None and batch.isdigit() and int(batch) <= batch_id):
                storage.delete(info.key)
        old = batch_id - self.commit_log_retention() if batch_id is not None else -1
        if old >= 0:
            session = shared_session(self.config.connection)
            try:
                forget_batches(session, self.config.commit_keyspace, self.config.commit_table,
                               sink_id=self.config.sink_id, batch_keys=[str(old)])
            except driver_errors() as exc:
                raise self.config.connection.error(f"pruning {self.config.commit_table}", exc) from None


def check_changelog(changelog: Changelog, stored: StructType, key_fields: list[str], table: TargetTable) -> None:
    """``writeMode=upsert``: ``keyColumns`` is the table's primary key (what a delete names) and a
    ``sequenceColumn`` is a whole number (it becomes the write timestamp). Driver side."""
    if sorted(changelog.key_columns) != sorted(key_fields):
        raise ConfigError(ChangelogOptions.key_columns.key, f"{list(changelog.key_columns)} is not the primary key of "
                          f"{table} (an upsert and a delete name a row by it)", ", ".join(key_fields))
    seq = changelog.sequence_column
    if seq is not None and not isinstance(stored[seq].dataType, (LongType, IntegerType, ShortType)):
        raise ConfigError(ChangelogOptions.sequence_column.key, f"'{seq}' is {stored[seq].dataType.simpleString()}; "
                          "on Cassandra it is each change's write timestamp, a whole number",
                          "a long column, e.g. a log position or microseconds since the epoch")


SINKS: dict[str, type[CassandraSink]] = {SEMANTIC_UPSERT: UpsertSink, SEMANTIC_WRITE_AHEAD: WriteAheadSink}


def CassandraSinkConnector(options: Mapping[str, str] | None, schema: StructType) -> CassandraSink:  # noqa: N802 - named as the class it stands for
    """The sink for ``options['semantic']`` (default upsert), checked against the table."""
    config = CassandraSinkConfig.from_options(options)
    return SINKS[config.semantic](options, schema, config)


CassandraSinkConnector.validate = CassandraSink.validate  # type: ignore[attr-defined]  # validates as a Sink class does

__all__ = ["CassandraSinkConnector", "SINKS", "UpsertSink", "WriteAheadSink"]
