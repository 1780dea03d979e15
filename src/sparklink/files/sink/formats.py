"""Output formats: row encoders (text, JSON lines, CSV) and bulk writers (Parquet, Avro, ORC).

A :class:`FormatConfig` is built on the driver from the ``format``, ``compression``,
``rowGroupSize`` and ``header`` options and validated against the input schema there. On
executors, row encoders turn an Arrow record batch into bytes that are appended to a part file
(so a file can be carried across micro-batches and concatenated by compaction), and bulk
writers stream record batches into one self-contained file. Encoding is done by pyarrow
(Parquet, ORC, CSV, text), the standard ``json`` module (JSON lines) and fastavro (Avro).
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import io
import json
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv
import pyarrow.orc as pa_orc
import pyarrow.parquet as pq

from sparklink.errors import ConfigError, DataError

OPTION_FORMAT = "format"
OPTION_COMPRESSION = "compression"
OPTION_ROW_GROUP_SIZE = "rowGroupSize"
OPTION_HEADER = "header"
ROW_FORMATS = ("text", "json", "csv")
BULK_FORMATS = ("parquet", "avro", "orc")
FORMATS = ROW_FORMATS + BULK_FORMATS
EXTENSIONS = {"text": ".txt", "json": ".json", "csv": ".csv", "parquet": ".parquet", "avro": ".avro", "orc": ".orc"}
COMPRESSIONS = {
    "parquet": ("snappy", "zstd", "gzip", "lz4", "brotli", "none"),
    "orc": ("snappy", "zstd", "zlib", "lz4", "none"),
    "avro": ("null", "deflate", "bzip2", "xz", "snappy", "zstandard"),
}
DEFAULT_COMPRESSION = {"parquet": "snappy", "orc": "snappy", "avro": "deflate"}
DEFAULT_ROW_GROUP_SIZE = 1024 * 1024


@dataclass(frozen=True, kw_only=True)
class FormatConfig:
    """Which format, and its settings. ``row_group_size`` is in rows (Parquet only)."""

    name: str
    compression: str | None = None
    row_group_size: int = DEFAULT_ROW_GROUP_SIZE
    header: bool = False

    def __post_init__(self) -> None:
        if self.name not in FORMATS:
            raise ConfigError(OPTION_FORMAT, f"unknown format '{self.name}'", ", ".join(FORMATS))
        if self.compression is not None:
            allowed = COMPRESSIONS.get(self.name)
            if allowed is None:
                raise ConfigError(OPTION_COMPRESSION, f"format '{self.name}' is written uncompressed",
                                  "compression applies to " + ", ".join(COMPRESSIONS))
            if self.compression not in allowed:
                raise ConfigError(OPTION_COMPRESSION, f"'{self.compression}' is not a {self.name} codec", ", ".join(allowed))
        if self.row_group_size < 1:
            raise ConfigError(OPTION_ROW_GROUP_SIZE, f"must be at least 1, got {self.row_group_size}")
        if self.name == "avro" and self.codec in ("snappy", "zstandard"):
            _check_avro_codec(self.codec)

    @property
    def bulk(self) -> bool:
        return self.name in BULK_FORMATS

    @property
    def codec(self) -> str:
        return self.compression or DEFAULT_COMPRESSION.get(self.name, "none")

    @property
    def extension(self) -> str:
        return EXTENSIONS[self.name]

    def validate(self, schema: pa.Schema) -> None:
        """Check that the input schema can be written in this format (driver, query start)."""
        if self.name == "text":
            if len(schema) != 1 or not pa.types.is_string(schema.field(0).type):
                raise ConfigError(OPTION_FORMAT, f"format 'text' writes one string column; the input has "
                                  f"{', '.join(f'{f.name}: {f.type}' for f in schema)}",
                                  "select a single string column, e.g. df.selectExpr('to_json(struct(*)) AS value')")
        elif self.name == "csv":
            for field in schema:
                if pa.types.is_nested(field.type) or pa.types.is_binary(field.type):
                    raise ConfigError(OPTION_FORMAT, f"format 'csv' cannot write column '{field.name}' of type {field.type}",
                                      "flat columns (strings, numbers, booleans, dates, timestamps)")
        elif self.name == "avro":
            avro_schema(schema)

    def row_encoder(self, schema: pa.Schema) -> "RowEncoder":
        if self.name == "text":
            return TextEncoder()
        if self.name == "json":
            return JsonLinesEncoder()
        if self.name == "csv":
            return CsvEncoder(header=self.header, schema=schema)
        raise ConfigError(OPTION_FORMAT, f"format '{self.name}' is a bulk format, not a row format")

    def bulk_writer(self, path: Path, schema: pa.Schema) -> "BulkWriter":
        if self.name == "parquet":
            return ParquetBulkWriter(path, schema, self.codec, self.row_group_size)
        if self.name == "orc":
            return OrcBulkWriter(path, schema, self.codec)
        if self.name == "avro":
            return AvroBulkWriter(path, schema, self.codec)
        raise ConfigError(OPTION_FORMAT, f"format '{self.name}' is a row format, not a bulk format")

    def to_options(self) -> dict[str, str]:
        options = {OPTION_FORMAT: self.name}
        if self.compression is not None:
            options[OPTION_COMPRESSION] = self.compression
        if self.name == "parquet":
            options[OPTION_ROW_GROUP_SIZE] = str(self.row_group_size)
        if self.name == "csv":
            options[OPTION_HEADER] = str(self.header).lower()
        return options


# ---------------------------------------------------------------------------------- row formats


class RowEncoder(ABC):
    """Arrow record batch -> bytes to append to a row-format part file (executor side)."""

    def header(self) -> bytes:
        """Bytes that start every new file (CSV header line), empty otherwise."""
        return b""

    @abstractmethod
    def encode(self, batch: pa.RecordBatch) -> bytes: ...


class TextEncoder(RowEncoder):
    """One line per row: the string value and a newline (a null is an empty line)."""

    def encode(self, batch: pa.RecordBatch) -> bytes:
        column = pc.fill_null(batch.column(0), "")
        lines = pc.binary_join_element_wise(column, pa.scalar("", pa.string()), "\n")
        if isinstance(lines, pa.ChunkedArray):
            lines = lines.combine_chunks()
        if len(lines) == 0:
            return b""
        offsets = np.frombuffer(lines.buffers()[1], dtype=np.int32)
        first, last = int(offsets[lines.offset]), int(offsets[lines.offset + len(lines)])
        return lines.buffers()[2].slice(first, last - first).to_pybytes()


def _json_default(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        return value.isoformat()
    if isinstance(value, (dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    raise TypeError(f"cannot write {type(value).__name__} as JSON")


class JsonLinesEncoder(RowEncoder):
    """One JSON object per line (timestamps ISO-8601, binary base64, as Spark writes them)."""

    def encode(self, batch: pa.RecordBatch) -> bytes:
        dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=_json_default).encode
        rows = batch.to_pylist()
        return ("\n".join(map(dumps, rows)) + "\n").encode("utf-8") if rows else b""


class CsvEncoder(RowEncoder):
    """RFC 4180 CSV via pyarrow; the header line (option ``header``) starts each file once."""

    def __init__(self, *, header: bool, schema: pa.Schema):
        self.with_header = header
        self.schema = schema

    def header(self) -> bytes:
        if not self.with_header:
            return b""
        sink = io.BytesIO()
        pa_csv.write_csv(self.schema.empty_table(), sink, pa_csv.WriteOptions(include_header=True))
        return sink.getvalue()

    def encode(self, batch: pa.RecordBatch) -> bytes:
        sink = io.BytesIO()
        pa_csv.write_csv(batch, sink, pa_csv.WriteOptions(include_header=False))
        return sink.getvalue()


# ---------------------------------------------------------------------------------- bulk formats


class BulkWriter(ABC):
    """Streams record batches into one self-contained file (executor side)."""

    @abstractmethod
    def write_batch(self, batch: pa.RecordBatch) -> None: ...

    @abstractmethod
    def size(self) -> int:
        """Bytes written so far (an estimate while buffers are open)."""

    @abstractmethod
    def close(self) -> int:
        """Finish the file, fsync it and return its length."""


class _NativeFileWriter(BulkWriter):
    def __init__(self, path: Path):
        self.path = path
        self.sink = pa.OSFile(str(path), "wb")

    def size(self) -> int:
        return self.sink.tell()

    def _finish_sink(self) -> int:
        self.sink.close()
        with open(self.path, "rb+") as handle:
            handle.flush()
            import os

            os.fsync(handle.fileno())
        return self.path.stat().st_size


class ParquetBulkWriter(_NativeFileWriter):
    def __init__(self, path: Path, schema: pa.Schema, codec: str, row_group_size: int):
        super().__init__(path)
        self.row_group_size = row_group_size
        self.writer = pq.ParquetWriter(self.sink, schema, compression=codec)

    def write_batch(self, batch: pa.RecordBatch) -> None:
        self.writer.write_batch(batch, row_group_size=self.row_group_size)

    def close(self) -> int:
        self.writer.close()
        return self._finish_sink()


class OrcBulkWriter(_NativeFileWriter):
    def __init__(self, path: Path, schema: pa.Schema, codec: str):
        super().__init__(path)
        self.writer = pa_orc.ORCWriter(self.sink, compression="uncompressed" if codec == "none" else codec)

    def write_batch(self, batch: pa.RecordBatch) -> None:
        self.writer.write(pa.Table.from_batches([batch]))

    def close(self) -> int:
        self.writer.close()
        return self._finish_sink()


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
        raise ConfigError(OPTION_FORMAT, f"format 'avro' cannot write column '{path}' of type {kind}",
                          "booleans, integers, floats, strings, binary, dates, timestamps, decimals, arrays, structs, "
                          "maps with string keys")
    return ["null", base] if field.nullable else base


def avro_schema(schema: pa.Schema) -> dict[str, Any]:
    """The Avro record schema for an Arrow schema (every nullable field is a union with null)."""
    return {"type": "record", "name": "sparklink_record",
            "fields": [{"name": f.name, "type": _avro_type(f, f.name)} for f in schema]}


def _check_avro_codec(codec: str) -> None:
    import fastavro

    try:
        fastavro.writer(io.BytesIO(), {"type": "record", "name": "probe", "fields": []}, [{}], codec=codec)
    except (ValueError, ImportError) as exc:
        raise ConfigError(OPTION_COMPRESSION, f"Avro codec '{codec}' is not available here ({exc})",
                          "null, deflate, bzip2, xz (snappy needs cramjam, zstandard needs zstandard)") from None


class AvroBulkWriter(BulkWriter):
    """Avro object container file via fastavro (records pass through Python: fastavro's API)."""

    def __init__(self, path: Path, schema: pa.Schema, codec: str):
        from fastavro.write import Writer

        self.path = path
        self.handle: BinaryIO = open(path, "wb")  # noqa: SIM115 - closed in close()
        self.writer = Writer(self.handle, avro_schema(schema), codec=codec)

    def write_batch(self, batch: pa.RecordBatch) -> None:
        for record in batch.to_pylist():
            self.writer.write(record)

    def size(self) -> int:
        return self.handle.tell()

    def close(self) -> int:
        import os

        self.writer.flush()
        self.handle.flush()
        os.fsync(self.handle.fileno())
        self.handle.close()
        return self.path.stat().st_size


# ---------------------------------------------------------------------------------- reading back


def read_bulk_batches(config: FormatConfig, path: Path) -> Iterator[pa.RecordBatch] | Iterator[dict[str, Any]]:
    """Records of a bulk file: Arrow batches (Parquet, ORC) or dicts (Avro). Used by compaction."""
    try:
        if config.name == "parquet":
            yield from pq.ParquetFile(path).iter_batches()
        elif config.name == "orc":
            yield from pa_orc.ORCFile(path).read().to_batches()
        elif config.name == "avro":
            import fastavro

            with open(path, "rb") as handle:
                yield from fastavro.reader(handle)
        else:
            raise ConfigError(OPTION_FORMAT, f"format '{config.name}' is not a bulk format")
    except (pa.ArrowInvalid, OSError, ValueError) as exc:
        raise DataError(f"{path}: cannot read {config.name} part file: {exc}") from exc
