"""The Spark schema of an Iceberg schema (driver side: the ``sparklink.iceberg`` source's planning).

Each Iceberg type maps to the Spark type PySpark gives the Arrow type pyiceberg reads it as
(``schema_to_pyarrow``, then ``from_arrow_schema``): the readers cast their batches to it. The
mapping is written out here, from the Iceberg types, so that planning does not import
``pyiceberg.io.pyarrow`` (``pyarrow.dataset`` and pandas: see :mod:`sparklink.iceberg.planning_io`);
``tests/iceberg/test_iceberg_planning.py`` holds it to the Arrow route for every type.

Nullability is the negation of Iceberg's ``required`` (of a field, a list's element, a map's
value). ``timestamp`` is Spark's ``TIMESTAMP_NTZ``, ``timestamptz`` its ``TIMESTAMP`` (the ``_ns``
types too); ``fixed``, ``geometry`` and ``geography`` are ``BINARY``; ``unknown`` is ``VOID``.
``uuid`` has no Spark type and is refused by column.
"""

from __future__ import annotations

from pyiceberg import types as iceberg
from pyspark.sql import types as spark

from sparklink.errors import DataError

_PRIMITIVES: dict[type, spark.DataType] = {
    iceberg.BooleanType: spark.BooleanType(),
    iceberg.IntegerType: spark.IntegerType(),
    iceberg.LongType: spark.LongType(),
    iceberg.FloatType: spark.FloatType(),
    iceberg.DoubleType: spark.DoubleType(),
    iceberg.DateType: spark.DateType(),
    iceberg.TimeType: spark.TimeType(6),
    iceberg.TimestampType: spark.TimestampNTZType(),
    iceberg.TimestampNanoType: spark.TimestampNTZType(),
    iceberg.TimestamptzType: spark.TimestampType(),
    iceberg.TimestamptzNanoType: spark.TimestampType(),
    iceberg.StringType: spark.StringType(),
    iceberg.BinaryType: spark.BinaryType(),
    iceberg.FixedType: spark.BinaryType(),
    iceberg.GeometryType: spark.BinaryType(),
    iceberg.GeographyType: spark.BinaryType(),
    iceberg.UnknownType: spark.NullType(),
}


class NoSparkType(Exception):
    """An Iceberg type (possibly nested in the column) that Spark has no type for."""


def spark_type(field_type: iceberg.IcebergType) -> spark.DataType:
    """The Spark type of one Iceberg type; :class:`NoSparkType` names the first type without one."""
    if isinstance(field_type, iceberg.DecimalType):
        return spark.DecimalType(field_type.precision, field_type.scale)
    if isinstance(field_type, iceberg.StructType):
        return spark.StructType([spark.StructField(nested.name, spark_type(nested.field_type), not nested.required)
                                 for nested in field_type.fields])
    if isinstance(field_type, iceberg.ListType):
        return spark.ArrayType(spark_type(field_type.element_type), not field_type.element_required)
    if isinstance(field_type, iceberg.MapType):
        return spark.MapType(spark_type(field_type.key_type), spark_type(field_type.value_type),
                             not field_type.value_required)
    mapped = _PRIMITIVES.get(type(field_type))
    if mapped is None:
        raise NoSparkType(str(field_type))
    return mapped


def spark_schema_of(schema, table_name: str) -> spark.StructType:
    """The Spark schema of an Iceberg ``Schema``; a column Spark has no type for is refused by name."""
    fields = []
    for column in schema.fields:
        try:
            fields.append(spark.StructField(column.name, spark_type(column.field_type), not column.required))
        except NoSparkType as missing:
            raise DataError(f"Iceberg table {table_name}: column '{column.name}' of type {column.field_type} has no "
                            f"Spark type the sparklink.iceberg source reads ({missing} has none)") from None
    return spark.StructType(fields)
