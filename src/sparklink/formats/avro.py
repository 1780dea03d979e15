"""Avro object container files (executor side), through ``fastavro`` (records pass through
Python: fastavro's API; it is imported when a file is first written or read).

Writing (:class:`AvroBulkWriter`): the Avro schema is derived from the Arrow schema
(:func:`avro_schema`, checked on the driver by the sink's format config); a block is written
once it holds ``rowGroupSize`` bytes (Avro's sync interval).

Reading (:class:`AvroFormat`): the Arrow schema is derived from the writer schema in the file
header (:func:`avro_to_arrow`): primitive types, nullable unions, records, arrays, maps, enums
and the common logical types.
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

import pyarrow as pa

from sparklink.errors import ConfigError, DataError
from sparklink.formats.base import BulkWriter, FileFormat, SegmentInput
from sparklink.formats.options import FormatWriteOptions
from sparklink.formats.read_config import ReadConfig
from sparklink.storage.file_input import open_binary

# ---------------------------------------------------------------------------------- writing


def _avro_type(field: pa.Field, path: str) -> Any:
    kind = field.type
    if pa.types.is_boolean(kind):
        base: Any = "boolean"
    elif pa.types.is_int8(kind) or pa.types.is_int16(kind) or pa.types.is_int32(kind):
        base = "int"
    elif pa.types.is_int64(kind):
        base = "long"
    elif pa.types.is_float32(kind):
        base = "float"
    elif pa.types.is_float64(kind):
        base = "double"
    elif pa.types.is_string(kind) or pa.types.is_large_string(kind):
        base = "string"
    elif pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
        base = "bytes"
    elif pa.types.is_date32(kind):
        base = {"type": "int", "logicalType": "date"}
    elif pa.types.is_timestamp(kind):
        base = {"type": "long", "logicalType": "timestamp-micros" if kind.tz else "local-timestamp-micros"}
    elif pa.types.is_decimal(kind):
        base = {"type": "bytes", "logicalType": "decimal", "precision": kind.precision, "scale": kind.scale}
    elif pa.types.is_list(kind) or pa.types.is_large_list(kind):
        base = {"type": "array", "items": _avro_type(kind.value_field, f"{path}.element")}
    elif pa.types.is_struct(kind):
        base = {"type": "record", "name": "r_" + path.replace(".", "_"),
                "fields": [{"name": kind.field(i).name, "type": _avro_type(kind.field(i), f"{path}.{kind.field(i).name}")}
                           for i in range(kind.num_fields)]}
    elif pa.types.is_map(kind) and pa.types.is_string(kind.key_type):
        base = {"type": "map", "values": _avro_type(kind.item_field, f"{path}.value")}
    else:
        raise ConfigError(FormatWriteOptions.format.key, f"format 'avro' cannot write column '{path}' of type {kind}",
                          "booleans, integers, floats, strings, binary, dates, timestamps, decimals, arrays, structs, "
                          "maps with string keys")
    return ["null", base] if field.nullable else base


def avro_schema(schema: pa.Schema) -> dict[str, Any]:
    """The Avro record schema for an Arrow schema (every nullable field is a union with null)."""
    return {"type": "record", "name": "sparklink_record",
            "fields": [{"name": f.name, "type": _avro_type(f, f.name)} for f in schema]}


def check_codec(codec: str) -> None:
    """Refuse an Avro codec whose library is not installed here (driver side, the sink's start)."""
    import fastavro

    try:
        fastavro.writer(io.BytesIO(), {"type": "record", "name": "probe", "fields": []}, [{}], codec=codec)
    except (ValueError, ImportError) as exc:
        raise ConfigError(FormatWriteOptions.compression.key, f"Avro codec '{codec}' is not available here ({exc})",
                          "null, deflate, bzip2, xz (snappy needs cramjam, zstandard needs zstandard)") from None


class AvroBulkWriter(BulkWriter):
    """Avro object container file via fastavro (records pass through Python: fastavro's API);
    a block is written once it holds ``block_bytes`` (Avro's sync interval)."""

    def __init__(self, path: Path | BinaryIO, schema: pa.Schema, codec: str, *, block_bytes: int):
        from fastavro.write import Writer

        self.path = path if isinstance(path, Path) else None
        self.block_bytes = block_bytes
        self.handle: BinaryIO = open(path, "wb") if isinstance(path, Path) else path  # noqa: SIM115 - closed in close()
        self.writer = Writer(self.handle, avro_schema(schema), codec=codec, sync_interval=block_bytes)
        self.arrow_bytes_since_flush = 0

    def write_batch(self, batch: pa.RecordBatch) -> None:
        for record in batch.to_pylist():
            self.writer.write(record)
        self.arrow_bytes_since_flush += batch.nbytes

    def buffered_bytes(self) -> int:
        return min(self.arrow_bytes_since_flush, self.block_bytes)

    def size(self) -> int:
        return self.handle.tell() + self.buffered_bytes()

    def release(self) -> bool:
        self.writer.flush()
        self.arrow_bytes_since_flush = 0
        return True

    def close(self) -> int:
        self.writer.flush()
        self.handle.flush()
        if self.path is None:  # a file object (an S3 upload): closing it sends its last part
            self.handle.close()
            return self.handle.tell()
        os.fsync(self.handle.fileno())
        self.handle.close()
        return self.path.stat().st_size


def writer_schema(source: Any) -> Any:
    """The writer schema in a file's header (compaction keeps the first input's)."""
    import fastavro

    return fastavro.reader(source).writer_schema


def write_records(handle: BinaryIO, schema: Any, codec: str, records: Iterable[Any]) -> None:
    """An Avro file of ``records`` (dicts, as :func:`read_records` yields them) into ``handle``
    under the writer ``schema`` (compaction)."""
    from fastavro.write import Writer

    writer = Writer(handle, schema, codec=codec)
    for record in records:
        writer.write(record)
    writer.flush()


def read_records(source: Any) -> Iterator[Any]:
    """Every record of a whole file, as dicts (compaction)."""
    import fastavro

    yield from fastavro.reader(source)


def read_table(source: Any, name: str) -> pa.Table:
    """A whole file (``sparklink verify``), its types inferred from the records."""
    import fastavro

    return pa.Table.from_pylist(list(fastavro.reader(source)))


# ---------------------------------------------------------------------------------- reading


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
    reads_through_read_ahead = True

    def infer_schema(self, path: str, config: ReadConfig) -> pa.Schema:
        import fastavro

        with open_binary(path, config.s3) as handle:
            return _file_schema(fastavro.reader(handle), path)

    def read(self, source: SegmentInput) -> Iterator[pa.RecordBatch]:
        import fastavro

        with open_binary(source.path, source.config.s3) as handle:
            reader = fastavro.reader(handle)
            schema = _file_schema(reader, source.path)
            chunk: list[Any] = []
            for record in reader:
                chunk.append(record)
                if len(chunk) >= source.config.rows_per_batch:
                    yield pa.RecordBatch.from_pylist(chunk, schema=schema)
                    chunk = []
            if chunk:
                yield pa.RecordBatch.from_pylist(chunk, schema=schema)
