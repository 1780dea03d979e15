"""From the sink's Parquet files to Iceberg ``DataFile`` entries (driver side, in the commit),
and the partition values the writers record for them (executor side).

pyiceberg's ``add_files`` is not used, for two reasons found by the adversarial run of issue 35:

* **column renames** (issue 35 item 7): ``add_files`` matches a file's columns with the table's
  *current* names, so a file written before ``update_schema().rename_column(...)`` can never be
  added: a logged micro-batch stayed ``committing`` for good. Here a file's columns are matched
  with the table's name mapping (``schema.name-mapping.default``), which keeps every former
  name of a field, as Iceberg's readers match files without field ids. A renamed column is
  served (the stream's column goes on filling the renamed field); a column the table no longer
  has is refused naming it and the way out.
* **partition values** (issue 35 item 5): ``add_files`` infers a file's partition from its
  column statistics, which gives ``-0.0`` for a file of ``0.0`` (Parquet's min/max of zeros)
  and null for a file of NaNs (no statistics): a reader filtering on the value then skips rows.
  Here the writer records the exact value of each identity partition field
  (:func:`encode_partition_value`), and the committer puts it in the data file's partition.
"""

from __future__ import annotations

import base64
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from sparklink.errors import CommitError, ConfigError

#: the keys of an encoded partition value (JSON: the committable goes into the commit log)
_FLOAT, _DAYS, _MICROS, _DECIMAL, _BYTES = "float", "days", "micros", "decimal", "base64"


def encode_partition_value(scalar: pa.Scalar) -> Any:
    """Executor side: one partition value as JSON (exact: floats as hex, so ``-0.0`` and NaN
    survive; dates as days, timestamps as microseconds, as Iceberg keeps them)."""
    if not scalar.is_valid:
        return None
    kind = scalar.type
    if pa.types.is_floating(kind):
        return {_FLOAT: float(scalar.as_py()).hex()}
    if pa.types.is_date(kind):
        return {_DAYS: scalar.cast(pa.date32()).cast(pa.int32()).as_py()}
    if pa.types.is_timestamp(kind):
        return {_MICROS: pc.cast(scalar.cast(pa.timestamp("us", kind.tz)), pa.int64()).as_py()}
    if pa.types.is_decimal(kind):
        return {_DECIMAL: str(scalar.as_py())}
    if pa.types.is_binary(kind) or pa.types.is_large_binary(kind) or pa.types.is_fixed_size_binary(kind):
        return {_BYTES: base64.b64encode(scalar.as_py()).decode("ascii")}
    if pa.types.is_boolean(kind) or pa.types.is_integer(kind) or pa.types.is_string(kind) or \
            pa.types.is_large_string(kind):
        return scalar.as_py()
    raise ConfigError("table", f"an identity partition on a column of type {kind} is not served by this sink")


def decode_partition_value(encoded: Any) -> Any:
    """Driver side: the value as pyiceberg's partition record holds it."""
    if not isinstance(encoded, dict):
        return encoded
    ((kind, value),) = encoded.items()
    if kind == _FLOAT:
        return float.fromhex(value)
    if kind in (_DAYS, _MICROS):
        return int(value)
    if kind == _DECIMAL:
        return Decimal(value)
    if kind == _BYTES:
        return base64.b64decode(value)
    raise CommitError(f"unknown partition value encoding {kind!r} in a committable")


def table_name_mapping(metadata):
    """The table's name mapping (every name a field had), or its schema's when unset."""
    return metadata.name_mapping() or metadata.schema().name_mapping


def resolve_columns(metadata, columns: list[str], table_name: str) -> dict[str, int]:
    """Driver side: the field id each input column fills, matched by name through the table's
    name mapping (a renamed field keeps its former names there). A column no field has had is
    refused, naming it and the way out."""
    mapping = table_name_mapping(metadata)
    schema = metadata.schema()
    resolved: dict[str, int] = {}
    for column in columns:
        field = mapped_field(mapping, column)
        if field is None or field.field_id is None or field.field_id not in schema.field_ids:
            raise ConfigError("table", f"column '{column}' of the input is not a column of {table_name} (its columns: "
                              f"{', '.join(f.name for f in schema.fields)})",
                              "add it to the table first (pyiceberg: update_schema().union_by_name(...) or "
                              "add_column), or leave it out of the query")
        resolved[column] = field.field_id
    return resolved


def mapped_field(mapping, name: str):
    """The top-level field of the name mapping that has (or had) ``name``, or None."""
    return next((field for field in mapping if name in field.names), None)


def data_file(io, metadata, committable: dict, table_name: str):
    """Driver side: the ``DataFile`` of one committable, its columns matched through the
    table's name mapping and checked against the current schema (pyiceberg's type rules), its
    statistics read from the Parquet footer, its partition the writer's exact values."""
    import pyarrow.parquet as pq
    from pyiceberg.io.pyarrow import (
        compute_statistics_plan,
        data_file_statistics_from_parquet_metadata,
        parquet_path_to_id_mapping,
        pyarrow_to_schema,
    )
    from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
    from pyiceberg.schema import _check_schema_compatible  # the check add_files runs (pinned pyiceberg 0.12)
    from pyiceberg.typedef import Record

    path = committable["file"]
    input_file = io.new_input(path)
    with input_file.open() as stream:
        footer = pq.read_metadata(stream)
    schema = metadata.schema()
    mapping = table_name_mapping(metadata)
    arrow_schema = footer.schema.to_arrow_schema()
    for column in arrow_schema.names:
        field = mapped_field(mapping, column)
        if field is None or field.field_id not in schema.field_ids:
            raise CommitError(f"{table_name} has no column '{column}' any more (dropped since the data file {path} "
                              f"was written); add the column back (pyiceberg update_schema().add_column) and restart "
                              f"the query to commit the file, then drop it again")
    provided = pyarrow_to_schema(arrow_schema, name_mapping=mapping, format_version=metadata.format_version)
    try:
        _check_schema_compatible(schema, provided)
    except ValueError as exc:
        raise CommitError(f"the data file {path} does not fit the schema of {table_name}: {exc}") from None
    statistics = data_file_statistics_from_parquet_metadata(
        parquet_metadata=footer, stats_columns=compute_statistics_plan(schema, metadata.properties),
        parquet_column_mapping=parquet_path_to_id_mapping(provided))
    spec = metadata.spec()
    values = committable.get("partition") or []
    if len(values) != len(spec.fields):
        raise CommitError(f"the data file {path} was written for {len(values)} partition field(s), but the spec of "
                          f"{table_name} has {len(spec.fields)} now (the partition spec changed while the query "
                          "wrote); restart the query")
    return DataFile.from_args(
        content=DataFileContent.DATA, file_path=path, file_format=FileFormat.PARQUET,
        partition=Record(*(decode_partition_value(v) for v in values)), file_size_in_bytes=len(input_file),
        sort_order_id=None, spec_id=metadata.default_spec_id, equality_ids=None, key_metadata=None,
        **statistics.to_serialized_dict())
