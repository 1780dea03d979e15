"""Spark <-> PostgreSQL type mapping (driver side, at query start).

* :func:`postgres_type_for` gives the column type used when the sink creates a missing table.
* :func:`spark_field_for` gives the Spark type of a column the table source reads, from the
  type name PostgreSQL reports (``format_type``), and :func:`select_expression` how the
  column is rendered in the ``COPY (SELECT ...)`` so Arrow's CSV reader can parse it.
"""

from __future__ import annotations

import re

from psycopg import sql
from pyspark.sql.types import (
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructField,
    TimestampNTZType,
    TimestampType,
)

from sparklink.errors import ConfigError

_SPARK_TO_PG: list[tuple[type[DataType], str]] = [
    (BooleanType, "boolean"), (ByteType, "smallint"), (ShortType, "smallint"), (IntegerType, "integer"),
    (LongType, "bigint"), (FloatType, "real"), (DoubleType, "double precision"), (StringType, "text"),
    (BinaryType, "bytea"), (DateType, "date"), (TimestampType, "timestamp with time zone"),
    (TimestampNTZType, "timestamp without time zone"),
]


def postgres_type_for(field: StructField) -> sql.Composable:
    """The PostgreSQL column type for a Spark field (jsonb for nested types)."""
    data_type = field.dataType
    if isinstance(data_type, DecimalType):
        return sql.SQL("numeric({}, {})").format(sql.Literal(data_type.precision), sql.Literal(data_type.scale))
    for spark_type, pg_type in _SPARK_TO_PG:
        if isinstance(data_type, spark_type):
            return sql.SQL(pg_type)
    if data_type.typeName() in ("array", "map", "struct"):
        return sql.SQL("jsonb")
    raise ConfigError("table", f"column '{field.name}' has Spark type {data_type.simpleString()}, which the "
                               f"sink cannot create a PostgreSQL column for; create the table yourself")


_NUMERIC = re.compile(r"^numeric\((\d+),(\d+)\)$")
_PG_TO_SPARK: dict[str, DataType] = {
    "smallint": ShortType(), "integer": IntegerType(), "bigint": LongType(), "real": FloatType(),
    "double precision": DoubleType(), "boolean": BooleanType(), "date": DateType(),
    "timestamp without time zone": TimestampNTZType(), "timestamp with time zone": TimestampType(),
    "bytea": BinaryType(), "oid": LongType(),
}


def _base(type_name: str) -> str:
    return re.sub(r"\(\d+\)$", "", type_name.replace(" ", "").replace("withouttimezone", " without time zone")
                  .replace("withtimezone", " with time zone").replace("doubleprecision", "double precision"))


def spark_field_for(name: str, type_name: str) -> StructField:
    """The (nullable) Spark field for a PostgreSQL column of ``format_type`` ``type_name``.

    Types without a Spark counterpart (json, uuid, arrays, intervals, enums ...) are read as
    their text form into a string column.
    """
    compact = type_name.replace(" ", "")
    match = _NUMERIC.match(compact)
    if match:
        precision, scale = int(match.group(1)), int(match.group(2))
        if precision <= 38:
            return StructField(name, DecimalType(precision, scale), True)
        return StructField(name, DecimalType(38, min(scale, 18)), True)
    if compact == "numeric":
        return StructField(name, DecimalType(38, 18), True)
    base = _base(type_name)
    return StructField(name, _PG_TO_SPARK.get(base, StringType()), True)


def select_expression(field: StructField) -> sql.Composable:
    """How the table source selects a column for COPY: text for string-typed columns, hex for
    bytea, UTC ISO form for timestamps with a time zone, the column itself otherwise."""
    column = sql.Identifier(field.name)
    data_type = field.dataType
    if isinstance(data_type, StringType):
        return sql.SQL("{}::text").format(column)
    if isinstance(data_type, BinaryType):
        return sql.SQL("'\\x' || encode({}, 'hex')").format(column)
    if isinstance(data_type, TimestampType):
        return sql.SQL("to_char({} AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US') || 'Z'").format(column)
    if isinstance(data_type, DecimalType):
        return sql.SQL("round({}, {})").format(column, sql.Literal(data_type.scale))
    return column
