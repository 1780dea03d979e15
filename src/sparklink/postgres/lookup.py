"""PostgreSQL lookups for :mod:`sparklink.asyncio` (Flink's async I/O against a database).

``PostgresLookup(dsn, table=..., keys={"table_column": "row_field"}, columns=[...])`` is an async
function object: called with an input row, it selects ``columns`` of the first matching row of
``table`` (or None), through a per-task pool of async connections. Identifiers are quoted with
``psycopg.sql`` and key values are always parameters. A raw ``query`` with ``%(field)s``
placeholders may be given instead of ``table``/``keys``/``columns``.

``PostgresLookup.sync_lookup`` gives the same lookup as a plain per-row function (the
synchronous baseline of the benchmark).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from sparklink.errors import ConfigError
from sparklink.postgres.async_pool import AsyncConnectionPool
from sparklink.postgres.connection import ConnectionSettings
from sparklink.postgres.identifiers import column_list, parse_table_name


class PostgresLookup:
    """An async function ``row -> dict | None`` for ordered_wait / unordered_wait."""

    def __init__(self, dsn: str, *, table: str | None = None, keys: Mapping[str, str] | None = None,
                 columns: Sequence[str] | None = None, query: str | None = None, pool_size: int = 8):
        self.connection = ConnectionSettings(dsn=dsn)
        if query is not None:
            if table or keys or columns:
                raise ConfigError("query", "give either query, or table with keys and columns, not both")
            self.statement: sql.Composable = sql.SQL(query)
            self.key_fields: dict[str, str] | None = None
        else:
            if not table or not keys or not columns:
                raise ConfigError("table", "a lookup needs table, keys ({table column: row field}) and columns")
            target = parse_table_name(table)
            self.key_fields = dict(keys)
            condition = sql.SQL(" AND ").join(
                sql.SQL("{} = {}").format(sql.Identifier(col), sql.Placeholder(f"k{i}"))
                for i, col in enumerate(self.key_fields))
            self.statement = sql.SQL("SELECT {} FROM {} WHERE {} LIMIT 1").format(
                column_list(list(columns)), target.identifier, condition)
        self.pool = AsyncConnectionPool(self.connection, pool_size)

    def _params(self, row: Mapping[str, Any]) -> dict[str, Any]:
        if self.key_fields is None:
            return dict(row)
        try:
            return {f"k{i}": row[field] for i, field in enumerate(self.key_fields.values())}
        except KeyError as exc:
            raise ConfigError("keys", f"input row has no field {exc.args[0]!r}", ", ".join(row)) from None

    async def __call__(self, row: Mapping[str, Any]) -> dict[str, Any] | None:
        params = self._params(row)
        async with self.pool.acquire() as conn:
            try:
                cursor = conn.cursor(row_factory=dict_row)
                await cursor.execute(self.statement, params)
                return await cursor.fetchone()
            except psycopg.Error as exc:
                raise self.connection.error("lookup", exc) from None

    async def open(self) -> None:
        """Nothing to do: connections open on first use."""

    async def close(self) -> None:
        await self.pool.close()

    def sync_lookup(self, conn: psycopg.Connection, row: Mapping[str, Any]) -> dict[str, Any] | None:
        """The same lookup, blocking, on ``conn`` (one round trip per row)."""
        cursor = conn.cursor(row_factory=dict_row)
        cursor.execute(self.statement, self._params(row))
        return cursor.fetchone()
