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


def table_column_types(conn: psycopg.Connection, table: TableName) -> dict[str, str]:
    """Each column of ``table`` with its ``pg_type.typname`` (``int8``, ``text``, ``timestamptz``
    ...), in column order."""
    rows = conn.execute(
        "SELECT a.attname, t.typname FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid "
        "WHERE a.attrelid = to_regclass(%s) AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum",
        (str(table),)).fetchall()
    return dict(rows)


def ensure_target_table(conn: psycopg.Connection, table: TableName, schema: StructType,
                        key_columns: tuple[str, ...], *, create: bool) -> list[str]:
    """Create ``table`` from the DataFrame schema if it is missing (primary key: ``key_columns``),
    then check that every DataFrame column exists in it. Returns the ``pg_type.typname`` of each
    DataFrame column, in schema order: what decides whether a COPY can be binary. Driver side,
    once per micro-batch."""
    if not table_exists(conn, table):
        if not create:
            raise ConfigError("table", f"table {table} does not exist (set createTable=true to create it)")
        columns = [sql.SQL("{} {}").format(sql.Identifier(f.name), postgres_type_for(f)) for f in schema.fields]
        if key_columns:
            columns.append(sql.SQL("PRIMARY KEY ({})").format(sql.SQL(", ").join(map(sql.Identifier, key_columns))))
        conn.execute(sql.SQL("CREATE TABLE IF NOT EXISTS {} ({})").format(table.identifier, sql.SQL(", ").join(columns)))
        conn.commit()
    existing = table_column_types(conn, table)
    missing = [name for name in schema.names if name not in existing]
    if missing:
        raise ConfigError("table", f"table {table} has no column(s) {missing} of the DataFrame "
                                   f"(it has {sorted(existing)})")
    return [existing[name] for name in schema.names]
