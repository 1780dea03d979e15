"""``semantic=upsert``: the idempotent sink (Flink's idempotent sink connector, section 8.4.1).

Each task writes its rows in one transaction committed by the task. A retried task or a
replayed batch rewrites the same rows with the same values, so the table ends exactly as if
every row were written once, provided keys are deterministic. Within a task, the last row of a
key wins. Readers may see older values during a replay (section 8.1).

Executor side, the rows take one of two paths:

* *Straight into the table*, while no key collides: COPY into the target under a savepoint, in
  windows that double from one Arrow batch to ``DIRECT_WINDOW_MAX_ROWS``. A stream of new keys
  then costs what a plain COPY costs.
* *Through a staging table*, from the first window whose COPY fails with a unique violation (a
  key exists, repeats in the task, or a concurrent task holds it) or a deadlock: the window is
  rolled back to its savepoint and re-sent, with every later batch, into a temporary table,
  merged at the end of the task. Staged rows come later in the task than the rows already in
  the table, so they win.

The merge of staged rows takes one of two routes:

* *Keys unique among the staged rows* (checked on the Arrow key columns as they pass): a
  set-based ``UPDATE ... FROM`` of the rows whose key exists, then ``INSERT ... WHERE NOT
  EXISTS`` of the others. About twice as fast as ``ON CONFLICT`` for new keys, which pays a
  speculative insertion per row. It runs under a savepoint: if a concurrent task inserts one of
  the same keys first (unique violation) or the two updates deadlock, the savepoint is rolled
  back and the ordered route below runs instead.
* *Otherwise* (or as that fallback): ``INSERT ... SELECT DISTINCT ON (keys) ... ORDER BY keys,
  ctid DESC ON CONFLICT (keys) DO UPDATE``, which keeps the last row of each key and locks keys
  in one order in every task.

Both routes leave a row untouched when the incoming values are byte-for-byte the stored ones
(``record *= record``, PostgreSQL's image equality, defined for every type): a replayed batch
then costs reads, not a new version of every row.
"""

from __future__ import annotations

import logging

import psycopg
import pyarrow as pa
import pyarrow.compute as pc
from psycopg import errors as pg_errors
from psycopg import sql

from sparklink.postgres.at_least_once_sink import NoOpCommitter
from sparklink.postgres.copy_transport import CopyWriter
from sparklink.postgres.identifiers import column_list
from sparklink.postgres.sink_base import CopyingWriter, PostgresSink
from sparklink.postgres.txn_records import TXN_TABLE, record_txn, txn_recorded
from sparklink.sink import Committable, Committer, WriterContext
from sparklink.sink.txn import Txn

LOG = logging.getLogger(__name__)
STAGING_TABLE = "sparklink_upsert_staging"
# Rows sent straight to the target under one savepoint (a subtransaction) are kept in memory
# until the savepoint is released, to be re-sent to staging if a key collides. Windows double
# from the first batch up to this size: few subtransactions, bounded memory.
DIRECT_WINDOW_MAX_ROWS = 1 << 17


def _row_of(alias: sql.Composable, columns: list[str]) -> sql.Composed:
    """``ROW(alias.c1, ...)::record``: an anonymous record for image comparison."""
    return sql.SQL("ROW({})::record").format(
        sql.SQL(", ").join(sql.SQL("{}.{}").format(alias, sql.Identifier(c)) for c in columns))


class KeyTracker:
    """Executor side: the key columns of a task's record batches, to tell whether any key
    occurs twice (which rules out the set-based merge)."""

    def __init__(self, keys: list[str]):
        self.keys = keys
        self._batches: list[pa.RecordBatch] = []
        self.rows = 0

    def add(self, batch: pa.RecordBatch) -> None:
        self._batches.append(batch.select(self.keys))
        self.rows += batch.num_rows

    def unique(self) -> bool:
        if not self._batches:
            return True
        table = pa.Table.from_batches(self._batches)
        if len(self.keys) == 1:  # a hash of one column: several times cheaper than a group-by
            return len(pc.unique(table.column(0))) == self.rows
        return table.group_by(self.keys).aggregate([]).num_rows == self.rows


class UpsertWriter(CopyingWriter):
    """Executor side: COPY straight into the target while no key collides, else COPY into a
    temporary table and merge; then commit."""

    _staging = sql.Identifier(STAGING_TABLE)
    _savepoint = sql.Identifier("sparklink_direct")

    def __init__(self, sink: "UpsertSink", context: WriterContext):
        super().__init__(sink, context)
        self.keys = list(self.config.key_columns)
        self.others = [c for c in self.columns if c not in self.keys]
        self.key_tracker = KeyTracker(self.keys)
        self.staging = False  # True once the task's rows go through the staging table
        self._window: list[pa.RecordBatch] = []  # sent straight to the target since the savepoint
        self._window_rows = 0
        self._window_limit = 0  # the first window is the first batch; windows then double

    def begin(self, conn: psycopg.Connection) -> None:
        conn.execute(sql.SQL("SAVEPOINT {}").format(self._savepoint))

    def copy_target(self) -> sql.Composable:
        return self._staging if self.staging else self.config.table.identifier

    def send(self, batch: pa.RecordBatch) -> None:
        assert self.conn is not None and self.copy is not None  # write_batch sends only through an open COPY
        if self.staging:
            self.copy.write(batch)
            self.key_tracker.add(batch)
            return
        self._window.append(batch)
        self._window_rows += batch.num_rows
        try:
            self.copy.write(batch)
            if self._window_rows >= self._window_limit:
                self._close_window()
                self.conn.execute(sql.SQL("SAVEPOINT {}").format(self._savepoint))
                self.copy = CopyWriter(self.conn.cursor(), self.copy_target(), self.columns, self.column_types)
        except (pg_errors.UniqueViolation, pg_errors.DeadlockDetected) as exc:
            self._stage_from_here(exc)

    def _close_window(self) -> None:
        """End the direct COPY: its rows are in the target, under this task's transaction."""
        assert self.conn is not None and self.copy is not None  # called from send and flush, with a COPY open
        self.copy.finish()
        self.conn.execute(sql.SQL("RELEASE SAVEPOINT {}").format(self._savepoint))
        self._window_limit = min(max(2 * self._window_limit, self._window_rows), DIRECT_WINDOW_MAX_ROWS)
        self._window, self._window_rows = [], 0

    def _stage_from_here(self, exc: psycopg.Error) -> None:
        """A key of the window exists (in the table, or earlier in this task), or a concurrent
        task holds one: undo the window and send it, and every later batch, to staging."""
        LOG.info("a key written to %s already exists or is being written (%s); merging the rest of the task "
                 "through a staging table", self.config.table, type(exc).__name__)
        assert self.conn is not None and self.copy is not None  # called from send and flush, with a COPY open
        self.copy.cancel(exc)
        self.conn.execute(sql.SQL("ROLLBACK TO SAVEPOINT {}").format(self._savepoint))
        self.staging = True
        # Only the DataFrame's columns, no constraints (target columns the DataFrame lacks may be
        # NOT NULL with a default) and no sequence column: a per-row nextval() cost more than
        # the whole COPY into the staging table. The column types are the target's, so the
        # image comparison of the merge compares like with like.
        self.conn.execute(sql.SQL("CREATE TEMPORARY TABLE {} ON COMMIT DROP AS SELECT {} FROM {} WITH NO DATA")
                          .format(self._staging, column_list(self.columns), self.config.table.identifier))
        self.copy = CopyWriter(self.conn.cursor(), self.copy_target(), self.columns, self.column_types)
        for batch in self._window:
            self.copy.write(batch)
            self.key_tracker.add(batch)
        self._window, self._window_rows = [], 0

    def flush(self) -> None:
        if self.copy is None:
            return
        try:
            if not self.staging:
                try:
                    self._close_window()
                except (pg_errors.UniqueViolation, pg_errors.DeadlockDetected) as exc:
                    self._stage_from_here(exc)
            if self.staging:
                self.copy.finish()
        except psycopg.Error as exc:
            raise self.config.connection.error(f"COPY into {self.config.table}", exc) from None

    def _keys_match(self, left: sql.Composable, right: sql.Composable) -> sql.Composed:
        return sql.SQL(" AND ").join(sql.SQL("{}.{} = {}.{}").format(left, sql.Identifier(k), right, sql.Identifier(k))
                                     for k in self.keys)

    def set_based_merge(self) -> list[sql.Composed]:
        """UPDATE the changed rows whose key exists, then INSERT the rows whose key does not.
        Only correct when no key occurs twice in the staging table."""
        target, staging = sql.Identifier("t"), sql.Identifier("s")
        statements = []
        if self.others:
            statements.append(sql.SQL("UPDATE {table} AS t SET {assign} FROM {staging} AS s WHERE {match} "
                                      "AND NOT ({old} *= {new})").format(
                table=self.config.table.identifier, staging=self._staging,
                assign=sql.SQL(", ").join(sql.SQL("{} = s.{}").format(sql.Identifier(c), sql.Identifier(c))
                                          for c in self.others),
                match=self._keys_match(target, staging),
                old=_row_of(target, self.others), new=_row_of(staging, self.others)))
        statements.append(sql.SQL("INSERT INTO {table} ({cols}) SELECT {staged_cols} FROM {staging} AS s "
                                  "WHERE NOT EXISTS (SELECT 1 FROM {table} AS t WHERE {match})").format(
            table=self.config.table.identifier, cols=column_list(self.columns), staging=self._staging,
            staged_cols=sql.SQL(", ").join(sql.SQL("s.{}").format(sql.Identifier(c)) for c in self.columns),
            match=self._keys_match(target, staging)))
        return statements

    def merge_statement(self) -> sql.Composed:
        """The ordered route: last row per key, ON CONFLICT, unchanged rows left alone."""
        action: sql.Composable
        if self.others:
            action = sql.SQL("DO UPDATE SET {} WHERE NOT ({} *= {})").format(
                sql.SQL(", ").join(sql.SQL("{} = EXCLUDED.{}").format(sql.Identifier(c), sql.Identifier(c))
                                   for c in self.others),
                _row_of(self.config.table.identifier, self.others), _row_of(sql.SQL("EXCLUDED"), self.others))
        else:
            action = sql.SQL("DO NOTHING")
        # DISTINCT ON keeps the last row per key: the staging table is new, private to this
        # transaction and only ever appended to by one COPY (no update, delete or vacuum), so
        # its tuples lie in insertion order and ctid order is arrival order. ORDER BY keys
        # locks rows in one order in every task, so concurrent tasks do not deadlock.
        return sql.SQL("INSERT INTO {target} ({cols}) SELECT DISTINCT ON ({keys}) {cols} FROM {staging} "
                       "ORDER BY {keys}, ctid DESC ON CONFLICT ({keys}) {action}").format(
            target=self.config.table.identifier, cols=column_list(self.columns), keys=column_list(self.keys),
            staging=self._staging, action=action)

    def _merge(self, conn: psycopg.Connection) -> None:
        if self.key_tracker.unique():
            try:
                with conn.transaction():  # a savepoint inside the task's transaction
                    for statement in self.set_based_merge():
                        conn.execute(statement)
                return
            except (pg_errors.UniqueViolation, pg_errors.DeadlockDetected) as exc:
                LOG.info("a concurrent writer touched the same keys of %s (%s); merging with ON CONFLICT instead",
                         self.config.table, type(exc).__name__)
        conn.execute(self.merge_statement())

    def prepare_commit(self) -> list[Committable]:
        if not self.has_rows:
            return []
        assert self.conn is not None  # has_rows
        self.apply_changes()
        try:
            if self.staging:
                self._merge(self.conn)
            self.conn.commit()
        except psycopg.Error as exc:
            raise self.config.connection.error(f"merging rows into {self.config.table}", exc) from None
        return [{"v": 1, "rows": self.rows, "partition": self.context.partition_id}]


class UpsertSink(PostgresSink):
    def create_writer(self, context: WriterContext) -> UpsertWriter:
        return UpsertWriter(self, context)

    def create_committer(self) -> Committer:
        return NoOpCommitter()

    def txn_committed(self, txn: Txn) -> bool:
        """``txnAppId`` / ``txnVersion``: the pair is recorded where :func:`commit_batch` records
        it: with a ``checkpointLocation`` the write has a commit log and the log entry named after
        the pair is the record (the SDK's default); without one, ``sparklink_txns``
        (txn_records.py). Both are looked at, so a pair recorded by a write with the other
        setting is not written twice."""
        if self.commit_log_dir() is not None and super().txn_committed(txn):
            return True
        with self.config.connection.connect() as conn:
            try:
                return txn_recorded(conn, self.config.table, txn)
            except psycopg.Error as exc:
                raise self.config.connection.error(f"reading {TXN_TABLE}", exc) from None

    def record_txn(self, txn: Txn) -> None:
        with self.config.connection.connect() as conn:
            try:
                record_txn(conn, self.config.table, txn)
                conn.commit()
            except psycopg.Error as exc:
                raise self.config.connection.error(f"recording {txn} in {TXN_TABLE}", exc) from None

