"""``writeMode=upsert`` on PostgreSQL: one reduced batch of changes (:mod:`sparklink.sink.changelog`)
applied to the target.

Runs where the semantic applies its rows: on executors (``upsert``, ``at-least-once``: each task
applies its own changes in its transaction) and on the driver (``write-ahead``: the committer
applies the whole batch from the write-ahead log; ``two-phase``: the executor only *stages* a
task's changes in a table of its prepared transaction, and the committer applies that table after
``COMMIT PREPARED``). The caller has reduced the changes to one per key
(:meth:`~sparklink.sink.changelog.Changelog.reduce`); this module

1. COPYs them into a staging table: the stored columns plus a ``boolean`` delete flag (binary
   COPY when the types allow it). A temporary table (``ON COMMIT DROP``) for transactions that
   commit (:meth:`ChangelogApplier.apply`); for ``two-phase`` a regular table named after the
   task attempt's transaction (:func:`staging_table_name`, :meth:`ChangelogApplier.stage`),
   created in the transaction that is PREPAREd (PostgreSQL refuses to prepare one that touched
   a temporary table), so a rolled-back attempt takes its staging table with it. It is a
   *logged* table: it holds the task's changes from ``PREPARE`` until the driver applies them,
   and PostgreSQL empties an unlogged table after a server crash, which would lose them without
   an error;
2. deletes the rows whose key has a delete: ``DELETE ... USING staging``, with a
   ``sequenceColumn`` only where the stored sequence value is not newer (``t.seq <= s.seq`` or
   null);
3. inserts or updates the others: ``INSERT ... ON CONFLICT (keys) DO UPDATE ... WHERE
   excluded.seq >= t.seq`` (with a ``sequenceColumn``), leaving a row untouched when its values
   are byte-for-byte the stored ones (``record *= record``), so a replay costs reads. Rows are
   inserted in key order, so concurrent tasks lock keys in one order.

Both statements touch disjoint keys (one change per key). Replaying the same batch is
idempotent: a delete finds no row, an upsert finds equal values.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import psycopg
import pyarrow as pa
import pyarrow.compute as pc
from psycopg import sql

from sparklink.errors import CommitError
from sparklink.postgres.copy_transport import CopyWriter
from sparklink.postgres.identifiers import TableName, column_list
from sparklink.sink.changelog import Changelog, ChangeSet

DELETE_FLAG = "__sparklink_delete"
TEMP_STAGING = "sparklink_changelog_staging"
STAGING_PREFIX = "sparklink_cl_"
MAX_IDENTIFIER = 63  # PostgreSQL's NAMEDATALEN - 1


def staging_table_name(txn: str) -> str:
    """The staging table of one task attempt's prepared transaction ``txn``:
    ``sparklink_cl_<txn>``, or ``sparklink_cl_<digest of txn>`` when that is longer than an
    identifier may be (a truncated name could be the same for two attempts, and the second
    CREATE TABLE would wait for the first's prepared transaction)."""
    name = f"{STAGING_PREFIX}{txn}"
    if len(name) <= MAX_IDENTIFIER:
        return name
    return f"{STAGING_PREFIX}{hashlib.sha256(txn.encode()).hexdigest()[:40]}"


@dataclass(frozen=True)
class Staged:
    """What :meth:`ChangelogApplier.stage` put in a staging table: how many deletes and
    upserts (so the apply runs only the statements it needs)."""

    deletes: int
    upserts: int


def _row_of(alias: sql.Composable, columns: list[str]) -> sql.Composed:
    return sql.SQL("ROW({})::record").format(
        sql.SQL(", ").join(sql.SQL("{}.{}").format(alias, sql.Identifier(c)) for c in columns))


class ChangelogApplier:
    """Applies reduced change sets to ``table`` (picklable: names and types only)."""

    def __init__(self, table: TableName, changelog: Changelog, columns: list[str], column_types: list[str]):
        """``columns`` / ``column_types``: the stored columns (the ``opColumn`` left out) and
        their ``pg_type.typname`` in the target, in the DataFrame's order."""
        self.table = table
        self.changelog = changelog
        self.columns = columns
        self.column_types = column_types
        self.keys = list(changelog.key_columns)
        self.others = [c for c in columns if c not in self.keys]

    def staging_rows(self, changes: ChangeSet) -> pa.Table:
        """The reduced changes as staging rows: stored columns + the delete flag."""
        rows = changes.rows.select(self.columns)
        return rows.append_column(DELETE_FLAG, changes.deletes)

    def apply(self, conn: psycopg.Connection, changes: ChangeSet) -> None:
        """Apply ``changes`` in ``conn``'s open transaction (not committed here), through a
        temporary staging table."""
        if changes.num_rows == 0:
            return
        staging = sql.Identifier(TEMP_STAGING)
        conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(staging))
        create = sql.SQL("CREATE TEMPORARY TABLE {} ON COMMIT DROP AS SELECT {}, false AS {} FROM {} WITH NO DATA")
        staged = self._stage_into(conn, changes, staging, create)
        self._run_statements(conn, staging, staged)

    def stage(self, conn: psycopg.Connection, changes: ChangeSet, name: str) -> Staged:
        """Executor side (``two-phase``): create the table ``name`` beside the target and COPY
        ``changes`` into it, in ``conn``'s open transaction (which the caller PREPAREs). The
        target is not touched: no row of it is locked. A logged table (not UNLOGGED): the
        changes must survive a server crash between PREPARE and the driver's apply."""
        staging = self.table.sibling(name).identifier
        create = sql.SQL("CREATE TABLE {} AS SELECT {}, false AS {} FROM {} WITH NO DATA")
        return self._stage_into(conn, changes, staging, create)

    def apply_staged(self, conn: psycopg.Connection, name: str, staged: Staged) -> None:
        """Driver side (``two-phase``): apply the committed staging table ``name`` to the target
        and drop it, in ``conn``'s open transaction (the caller inserts the marker and commits).
        Refuses (:class:`~sparklink.errors.CommitError`) a table that does not hold exactly the
        changes the task staged (emptied or changed outside sparklink): applying it would lose
        changes without an error."""
        staging = self.table.sibling(name).identifier
        row = conn.execute(sql.SQL("SELECT count(*) FILTER (WHERE {flag}), count(*) FILTER (WHERE NOT {flag}) "
                                   "FROM {}").format(staging, flag=sql.Identifier(DELETE_FLAG))).fetchone()
        found = (int(row[0]), int(row[1])) if row is not None else (0, 0)
        if found != (staged.deletes, staged.upserts):
            raise CommitError(f"staging table {self.table.sibling(name)} holds {found[0]} deletes and {found[1]} "
                              f"upserts, but its task staged {staged.deletes} and {staged.upserts}: it was changed "
                              "outside sparklink, and applying it would lose changes")
        self._run_statements(conn, staging, staged)
        conn.execute(sql.SQL("DROP TABLE {}").format(staging))

    def staging_exists(self, conn: psycopg.Connection, name: str) -> bool:
        row = conn.execute("SELECT to_regclass(%s)", (str(self.table.sibling(name)),)).fetchone()
        return row is not None and row[0] is not None

    def _stage_into(self, conn: psycopg.Connection, changes: ChangeSet, staging: sql.Composable,
                    create: sql.SQL) -> Staged:
        conn.execute(create.format(staging, column_list(self.columns), sql.Identifier(DELETE_FLAG),
                                   self.table.identifier))
        copy = CopyWriter(conn.cursor(), staging, [*self.columns, DELETE_FLAG], [*self.column_types, "bool"])
        try:
            for batch in self.staging_rows(changes).to_batches(max_chunksize=64 * 1024):
                copy.write(batch)
            copy.finish()
        except BaseException as exc:
            copy.cancel(exc)
            raise
        deletes = int(pc.sum(changes.deletes.cast(pa.int64())).as_py() or 0)
        return Staged(deletes=deletes, upserts=changes.num_rows - deletes)

    def _run_statements(self, conn: psycopg.Connection, staging: sql.Composable, staged: Staged) -> None:
        if staged.deletes:
            conn.execute(self.delete_statement(staging))
        if staged.upserts:
            conn.execute(self.upsert_statement(staging))

    def _keys_match(self) -> sql.Composed:
        return sql.SQL(" AND ").join(sql.SQL("t.{k} = s.{k}").format(k=sql.Identifier(k)) for k in self.keys)

    def delete_statement(self, staging: sql.Composable) -> sql.Composed:
        """Delete each key flagged in staging; with a sequence column only where the stored row
        is not newer."""
        condition = sql.SQL("s.{flag} AND {match}").format(flag=sql.Identifier(DELETE_FLAG), match=self._keys_match())
        seq = self.changelog.sequence_column
        if seq is not None:
            condition = sql.SQL("{} AND (t.{seq} IS NULL OR t.{seq} <= s.{seq})").format(
                condition, seq=sql.Identifier(seq))
        return sql.SQL("DELETE FROM {} AS t USING {} AS s WHERE {}").format(self.table.identifier, staging, condition)

    def upsert_statement(self, staging: sql.Composable) -> sql.Composed:
        """Insert or update each key not flagged; with a sequence column only where the change
        is not older than the stored row."""
        action: sql.Composable
        if self.others:
            conditions = [sql.SQL("NOT ({} *= {})").format(_row_of(sql.Identifier("t"), self.others),
                                                           _row_of(sql.SQL("EXCLUDED"), self.others))]
            seq = self.changelog.sequence_column
            if seq is not None:
                conditions.insert(0, sql.SQL("(t.{seq} IS NULL OR EXCLUDED.{seq} >= t.{seq})").format(
                    seq=sql.Identifier(seq)))
            action = sql.SQL("DO UPDATE SET {} WHERE {}").format(
                sql.SQL(", ").join(sql.SQL("{c} = EXCLUDED.{c}").format(c=sql.Identifier(c)) for c in self.others),
                sql.SQL(" AND ").join(conditions))
        else:
            action = sql.SQL("DO NOTHING")
        return sql.SQL("INSERT INTO {target} AS t ({cols}) SELECT {cols} FROM {staging} WHERE NOT {flag} "
                       "ORDER BY {keys} ON CONFLICT ({keys}) {action}").format(
            target=self.table.identifier, cols=column_list(self.columns), staging=staging,
            flag=sql.Identifier(DELETE_FLAG), keys=column_list(self.keys), action=action)
