"""Avro object container files (executor side), decoded with ``fastavro``.

The Arrow schema is derived from the writer schema in the file header: primitive types,
nullable unions, records, arrays, maps, enums and the common logical types.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import fastavro
import pyarrow as pa

from sparklink.errors import DataError
from sparklink.files.source.config import FileSourceConfig
from sparklink.files.source.file_input import open_binary
from sparklink.files.source.formats.base import FileFormat, SegmentInput

_PRIMITIVES = {
    "null": pa.null(), "boolean": pa.bool_(), "int": pa.int32(), "long": pa.int64(), "float": pa.float32(),
    "double": pa.float64(), "bytes": pa.binary(), "string": pa.string(),
}


def avro_to_arrow(schema: Any, path: str) -> pa.DataType:
    """The Arrow type of an Avro (parsed) schema."""
    if isinstance(schema, str):
        if schema in _PRIMITIVES:
            return _PRIMITIVES[schema]
        raise DataError(f"{path}: Avro type '{schema}' is not supported")
    if isinstance(schema, list):  # union: only [null, X] maps to a column
        branches = [s for s in schema if s != "null"]
        if len(branches) != 1:
            raise DataError(f"{path}: Avro union {schema} is not supported (only [\"null\", T])")
        return avro_to_arrow(branches[0], path)
    kind = schema.get("type")
    logical = schema.get("logicalType")
    if logical == "date":
        return pa.date32()
    if logical in ("timestamp-millis", "timestamp-micros"):
        return pa.timestamp("us", tz="UTC")
    if logical in ("local-timestamp-millis", "local-timestamp-micros"):
        return pa.timestamp("us")
    if logical == "decimal":
        return pa.decimal128(schema["precision"], schema.get("scale", 0))
    if kind == "record":
        return pa.struct([pa.field(f["name"], avro_to_arrow(f["type"], path)) for f in schema["fields"]])
    if kind == "array":
        return pa.list_(avro_to_arrow(schema["items"], path))
    if kind == "map":
        return pa.map_(pa.string(), avro_to_arrow(schema["values"], path))
    if kind == "enum":
        return pa.string()
    if kind == "fixed":
        return pa.binary()
    return avro_to_arrow(kind, path)


def _file_schema(reader: Any, path: str) -> pa.Schema:
    struct = avro_to_arrow(reader.writer_schema, path)
    if not pa.types.is_struct(struct):
        raise DataError(f"{path}: the Avro writer schema is not a record")
    return pa.schema(list(struct))


class AvroFormat(FileFormat):
    name = "avro"

    def infer_schema(self, path: str, config: FileSourceConfig) -> pa.Schema:
        with open_binary(path, config.s3) as handle:
            return _file_schema(fastavro.reader(handle), path)

    def read(self, source: SegmentInput) -> Iterator[pa.RecordBatch]:
        with open_binary(source.path, source.config.s3) as handle:
            reader = fastavro.reader(handle)
            schema = _file_schema(reader, source.path)
            chunk: list[dict] = []
            for record in reader:
                chunk.append(record)
                if len(chunk) >= source.config.rows_per_batch:
                    yield pa.RecordBatch.from_pylist(chunk, schema=schema)
                    chunk = []
            if chunk:
                yield pa.RecordBatch.from_pylist(chunk, schema=schema)
