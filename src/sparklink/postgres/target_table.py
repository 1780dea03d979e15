"""The target table: created on the driver at query start if missing (``createTable``)."""

from __future__ import annotations

import psycopg
from psycopg import sql
from pyspark.sql.types import StructType

from sparklink.errors import ConfigError
from sparklink.postgres.identifiers import TableName
from sparklink.postgres.type_mapping import postgres_type_for


def table_exists(conn: psycopg.Connection, table: TableName) -> bool:
    name = str(table)
    row = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (name,)).fetchone()
    return bool(row and row[0])


def table_columns(conn: psycopg.Connection, table: TableName) -> list[str]:
    rows = conn.execute(
        "SELECT attname FROM pg_attribute WHERE attrelid = to_regclass(%s) AND attnum > 0 AND NOT attisdropped "
        "ORDER BY attnum", (str(table),)).fetchall()
    return [r[0] for r in rows]


def column_type_names(conn: psycopg.Connection, table: TableName, columns: list[str]) -> list[str]:
    """``pg_type.typname`` of each of ``columns`` of ``table`` (``int8``, ``text``,
    ``timestamptz`` ...), in ``columns`` order: what decides whether a COPY can be binary."""
    rows = conn.execute(
        "SELECT a.attname, t.typname FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid "
        "WHERE a.attrelid = to_regclass(%s) AND a.attnum > 0 AND NOT a.attisdropped", (str(table),)).fetchall()
    names = dict(rows)
    return [names[c] for c in columns]


def ensure_target_table(conn: psycopg.Connection, table: TableName, schema: StructType,
                        key_columns: tuple[str, ...], *, create: bool) -> None:
    """Create ``table`` from the DataFrame schema if it is missing (primary key: ``key_columns``),
    then check that every DataFrame column exists in it. Driver side, once per micro-batch."""
    if not table_exists(conn, table):
        if not create:
            raise ConfigError("table", f"table {table} does not exist (set createTable=true to create it)")
        columns = [sql.SQL("{} {}").format(sql.Identifier(f.name), postgres_type_for(f)) for f in schema.fields]
        if key_columns:
            columns.append(sql.SQL("PRIMARY KEY ({})").format(sql.SQL(", ").join(map(sql.Identifier, key_columns))))
        conn.execute(sql.SQL("CREATE TABLE IF NOT EXISTS {} ({})").format(table.identifier, sql.SQL(", ").join(columns)))
        conn.commit()
    existing = set(table_columns(conn, table))
    missing = [name for name in schema.names if name not in existing]
    if missing:
        raise ConfigError("table", f"table {table} has no column(s) {missing} of the DataFrame "
                                   f"(it has {sorted(existing)})")
