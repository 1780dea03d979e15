"""``semantic=upsert``: the idempotent sink (Flink's idempotent sink connector, section 8.4.1).

Each task COPYs its rows into a temporary table and merges them into the target with
``INSERT ... ON CONFLICT (keyColumns) DO UPDATE``, in one transaction committed by the task.
A retried task or a replayed batch rewrites the same rows with the same values, so the table
ends exactly as if every row were written once, provided keys are deterministic. Within a
task, the last row of a key wins. Readers may see older values during a replay (section 8.1).
"""

from __future__ import annotations

import psycopg
from psycopg import sql

from sparklink.errors import ConfigError
from sparklink.postgres.identifiers import column_list
from sparklink.postgres.sink_config import OPTION_KEY_COLUMNS
from sparklink.postgres.sink_base import CopyingWriter, PostgresSink
from sparklink.postgres.at_least_once_sink import NoOpCommitter
from sparklink.sink import Committable, Committer, WriterContext

STAGING_TABLE = "sparklink_upsert_staging"


class UpsertWriter(CopyingWriter):
    """Executor side: COPY into a temporary table, then one merge statement, then commit."""

    _staging = sql.Identifier(STAGING_TABLE)

    def begin(self, conn: psycopg.Connection) -> None:
        # Only the DataFrame's columns, no constraints (target columns the DataFrame lacks may be
        # NOT NULL with a default) and no sequence column: a per-row nextval() cost more than
        # the whole COPY into the staging table.
        conn.execute(sql.SQL("CREATE TEMPORARY TABLE {} ON COMMIT DROP AS SELECT {} FROM {} WITH NO DATA")
                     .format(self._staging, column_list(self.columns), self.config.table.identifier))

    def copy_target(self) -> sql.Composable:
        return self._staging

    def merge_statement(self) -> sql.Composed:
        keys = list(self.config.key_columns)
        others = [c for c in self.columns if c not in keys]
        if others:
            action = sql.SQL("DO UPDATE SET {}").format(sql.SQL(", ").join(
                sql.SQL("{} = EXCLUDED.{}").format(sql.Identifier(c), sql.Identifier(c)) for c in others))
        else:
            action = sql.SQL("DO NOTHING")
        # DISTINCT ON keeps the last row per key: the staging table is new, private to this
        # transaction and only ever appended to by one COPY (no update, delete or vacuum), so
        # its tuples lie in insertion order and ctid order is arrival order. ORDER BY keys
        # locks rows in one order in every task, so concurrent tasks do not deadlock.
        return sql.SQL("INSERT INTO {target} ({cols}) SELECT DISTINCT ON ({keys}) {cols} FROM {staging} "
                       "ORDER BY {keys}, ctid DESC ON CONFLICT ({keys}) {action}").format(
            target=self.config.table.identifier, cols=column_list(self.columns), keys=column_list(keys),
            staging=self._staging, action=action)

    def prepare_commit(self) -> list[Committable]:
        if self.conn is None or self.copy is None:
            return []
        try:
            self.conn.execute(self.merge_statement())
            self.conn.commit()
        except psycopg.Error as exc:
            raise self.config.connection.error(f"merging rows into {self.config.table}", exc) from None
        return [{"v": 1, "rows": self.rows, "partition": self.context.partition_id}]


class UpsertSink(PostgresSink):
    def create_writer(self, context: WriterContext) -> UpsertWriter:
        return UpsertWriter(self, context)

    def create_committer(self) -> Committer:
        return NoOpCommitter()

    def prepare_target(self, conn: psycopg.Connection) -> None:
        if not has_unique_index(conn, str(self.config.table), self.config.key_columns):
            raise ConfigError(OPTION_KEY_COLUMNS, f"table {self.config.table} has no primary key or unique index "
                                                  f"on exactly ({', '.join(self.config.key_columns)}); "
                                                  "ON CONFLICT needs one")


def has_unique_index(conn: psycopg.Connection, table: str, columns: tuple[str, ...]) -> bool:
    """True if ``table`` has a unique index (or primary key) on exactly ``columns``."""
    rows = conn.execute(
        "SELECT array_agg(a.attname::text ORDER BY a.attname) FROM pg_index i "
        "JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) "
        "WHERE i.indrelid = to_regclass(%s) AND i.indisunique AND i.indpred IS NULL GROUP BY i.indexrelid",
        (table,)).fetchall()
    wanted = sorted(columns)
    return any(sorted(r[0]) == wanted for r in rows)
