"""PostgreSQL lookups for :mod:`sparklink.asyncio` (Flink's async I/O against a database).

``PostgresLookup(dsn, table=..., keys={"table_column": "row_field"}, columns=[...])`` is an async
function object: called with an input row, it selects ``columns`` of the first matching row of
``table`` (or None), through a per-task pool of async connections. Identifiers are quoted with
``psycopg.sql`` and key values are always parameters. A raw ``query`` with ``%(field)s``
placeholders may be given instead of ``table``/``keys``/``columns``.

``PostgresLookup.sync_lookup`` gives the same lookup as a plain per-row function (the
synchronous baseline of the benchmark).

Used with ordered_wait / unordered_wait, the lookup is *batched* (:meth:`lookup_batch`): the
runner hands it groups of rows as Arrow slices, and each group is one query,
``WHERE key = ANY(%s)`` (one key column) or a join with ``unnest(...)`` of the key arrays
(several), on one of the pool's connections; up to ``pool_size`` groups run at once. Results
are matched back to the rows with Arrow (``index_in`` + ``take``). A raw ``query`` is sent as
one pipeline of per-row statements per group (one round trip, psycopg's ``executemany``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import psycopg
import pyarrow as pa
import pyarrow.compute as pc
from psycopg import sql
from psycopg.rows import dict_row
from psycopg.types.string import StrDumper

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
            self.statement: sql.SQL | sql.Composed = sql.SQL(query)
            self.key_fields: dict[str, str] | None = None
            self.columns: list[str] | None = None
        else:
            if not table or not keys or not columns:
                raise ConfigError("table", "a lookup needs table, keys ({table column: row field}) and columns")
            target = parse_table_name(table)
            self.key_fields = dict(keys)
            self.columns = list(columns)
            key_columns = list(self.key_fields)
            if len(key_columns) == 1:
                self.batch_statement: sql.Composed = sql.SQL(
                    "SELECT DISTINCT ON ({key}) {key}, {cols} FROM {table} WHERE {key} = ANY({values})").format(
                    key=sql.Identifier(key_columns[0]), cols=column_list(self.columns), table=target.identifier,
                    values=sql.Placeholder("keys"))
            else:
                aliases = [sql.Identifier(f"sparklink_k{i}") for i in range(len(key_columns))]
                self.batch_statement = sql.SQL(
                    "SELECT DISTINCT ON ({tkeys}) {tkeys}, {tcols} FROM {table} AS t JOIN unnest({arrays}) "
                    "AS k({aliases}) ON {condition}").format(
                    tkeys=sql.SQL(", ").join(sql.SQL("t.{}").format(sql.Identifier(c)) for c in key_columns),
                    tcols=sql.SQL(", ").join(sql.SQL("t.{}").format(sql.Identifier(c)) for c in self.columns),
                    table=target.identifier,
                    arrays=sql.SQL(", ").join(sql.Placeholder(f"keys{i}") for i in range(len(key_columns))),
                    aliases=sql.SQL(", ").join(aliases),
                    condition=sql.SQL(" AND ").join(sql.SQL("t.{} = k.{}").format(sql.Identifier(c), a)
                                                    for c, a in zip(key_columns, aliases, strict=False)))
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

    @property
    def parallelism(self) -> int:
        """How many groups of rows the async runner keeps in flight (one per pooled connection)."""
        return self.pool.size

    async def lookup_batch(self, batch: pa.RecordBatch, output_schema: pa.Schema) -> list[pa.Array]:
        """The output columns for the rows of ``batch`` (executor side, on the task's event loop):
        one query on one pooled connection. Missing keys (and null keys) give nulls."""
        if self.key_fields is None:
            return await self._query_batch(batch, output_schema)
        assert self.columns is not None  # given with key_fields (table mode, checked in __init__)
        missing = [f for f in self.key_fields.values() if f not in batch.schema.names]
        if missing:
            raise ConfigError("keys", f"input rows have no field {missing[0]!r}", ", ".join(batch.schema.names))
        unknown = [c for c in self.columns if c not in output_schema.names]
        if unknown:
            raise ConfigError("columns", f"lookup column(s) {unknown} are not in output_schema {output_schema.names}")
        inputs = [batch.column(f) for f in self.key_fields.values()]
        if len(inputs) == 1:
            params = {"keys": pc.unique(inputs[0].drop_null()).to_pylist()}
        else:
            distinct = pa.table(inputs, names=[f"k{i}" for i in range(len(inputs))]).drop_null().group_by(
                [f"k{i}" for i in range(len(inputs))]).aggregate([])
            params = {f"keys{i}": distinct.column(f"k{i}").to_pylist() for i in range(len(inputs))}
        if not next(iter(params.values())):  # only null keys: nothing can match
            return [pa.nulls(batch.num_rows, f.type) for f in output_schema]
        async with self.pool.acquire() as conn:
            try:
                cursor = conn.cursor()
                # str as text (not psycopg's default "unknown"), so unnest() of the key arrays resolves
                cursor.adapters.register_dumper(str, StrDumper)
                await cursor.execute(self.batch_statement, params)
                found = await cursor.fetchall()
            except psycopg.Error as exc:
                raise self.connection.error("lookup", exc) from None
        n_keys = len(inputs)
        found_columns: list[Sequence[Any]] = (list(zip(*found, strict=False)) if found
                                              else [[] for _ in range(n_keys + len(self.columns))])
        if n_keys == 1:
            found_keys = pa.array(found_columns[0], type=inputs[0].type)
            index = pc.index_in(inputs[0], value_set=found_keys)
        else:
            position = {key: i for i, key in enumerate(zip(*found_columns[:n_keys], strict=False))}
            index = pa.array([position.get(k) for k in zip(*(c.to_pylist() for c in inputs), strict=False)], pa.int32())
        values = dict(zip(self.columns, found_columns[n_keys:], strict=False))
        return [pa.array(values[f.name], type=f.type).take(index) if f.name in values
                else pa.nulls(batch.num_rows, f.type) for f in output_schema]

    async def _query_batch(self, batch: pa.RecordBatch, output_schema: pa.Schema) -> list[pa.Array]:
        """Raw ``query`` mode: one pipeline of per-row statements (one round trip)."""
        rows = batch.to_pylist()
        results: list[dict[str, Any] | None] = []
        async with self.pool.acquire() as conn:
            try:
                cursor = conn.cursor(row_factory=dict_row)
                await cursor.executemany(self.statement, [self._params(r) for r in rows], returning=True)
                while True:
                    results.append(await cursor.fetchone())
                    if not cursor.nextset():
                        break
            except psycopg.Error as exc:
                raise self.connection.error("lookup", exc) from None
        for result in results:
            unknown = set(result or ()) - set(output_schema.names)
            if unknown:
                raise ConfigError("query", f"selects column(s) {sorted(unknown)} that are not in output_schema "
                                           f"{output_schema.names}")
        return [pa.array([None if r is None else r.get(f.name) for r in results], type=f.type)
                for f in output_schema]

    async def open(self) -> None:
        """Nothing to do: connections open on first use."""

    async def close(self) -> None:
        await self.pool.close()

    def sync_lookup(self, conn: psycopg.Connection, row: Mapping[str, Any]) -> dict[str, Any] | None:
        """The same lookup, blocking, on ``conn`` (one round trip per row)."""
        cursor = conn.cursor(row_factory=dict_row)
        cursor.execute(self.statement, self._params(row))
        return cursor.fetchone()
