"""Schemas: Spark <-> Arrow, inference at query start, and conformance of every batch read.

``spark_schema_from_arrow`` runs on the driver (once per query start, when the user gives no
schema). ``conform`` runs on executors for every batch: it picks the query's columns by name
and casts them to the query's types; a column that is missing or does not cast is *schema
drift* and fails with an error naming the file (and the first file, whose schema differs).
"""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa
from pyspark.sql.pandas.types import from_arrow_type, to_arrow_schema
from pyspark.sql.types import StructField, StructType

from sparklink.errors import ConfigError, DataError

Reference = Callable[[str], tuple[str | None, pa.DataType | None]]


def arrow_schema_of(schema: StructType) -> pa.Schema:
    """The exact Arrow schema Spark expects for record batches of ``schema``."""
    return to_arrow_schema(schema, timezone="UTC")


def spark_schema_from_arrow(schema: pa.Schema, origin: str) -> StructType:
    """A Spark schema (every field nullable) for an Arrow schema read from ``origin``."""
    fields = []
    for field in schema:
        arrow_type = field.type
        if pa.types.is_null(arrow_type):
            arrow_type = pa.string()  # a column that is null everywhere in the sample
        if pa.types.is_timestamp(arrow_type) and arrow_type.unit == "ns":
            arrow_type = pa.timestamp("us", tz=arrow_type.tz)
        try:
            spark_type = from_arrow_type(arrow_type)
        except (TypeError, ValueError) as exc:
            raise ConfigError("schema", f"column '{field.name}' of {origin} has type {field.type}, which Spark "
                              f"cannot hold ({exc}); give a schema") from None
        fields.append(StructField(field.name, spark_type, True))
    return StructType(fields)


def conform(batch: pa.RecordBatch, target: pa.Schema, *, path: str,
            reference: Reference) -> list[pa.Array]:
    """The columns of ``target`` taken from ``batch`` by name and cast to their target types.

    ``reference(column)`` returns the first file of the source and the column's type there
    (or ``(None, None)``), to name that file in a drift error.
    """
    arrays = []
    names = batch.schema.names
    for field in target:
        if field.name not in names:
            raise DataError(_drift(path, field, None, reference))
        column = batch.column(field.name)
        if column.type != field.type:
            try:
                column = column.cast(field.type, safe=True)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
                raise DataError(_drift(path, field, column.type, reference)) from None
        arrays.append(column)
    return arrays


def _drift(path: str, field: pa.Field, found: pa.DataType | None,
           reference: Reference) -> str:
    what = "has no column" if found is None else f"has column '{field.name}' as {found}, not {field.type}, in"
    text = (f"schema drift: {path} has no column '{field.name}' ({field.type})" if found is None
            else f"schema drift: {path} {what} the query schema")
    ref_path, ref_type = reference(field.name)
    if ref_path and ref_path != path and ref_type is not None:
        text += f"; the first file {ref_path} has '{field.name}' as {ref_type}"
    return text
