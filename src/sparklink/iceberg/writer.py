"""Executor side: one task's Arrow batches into Parquet data files under the table's location.

Files are written with the file sink's Parquet bulk writer (:mod:`sparklink.formats.parquet`,
picked by :class:`sparklink.formats.config.FormatConfig`, with the codec, level and row group size
of the table's write properties: :func:`table_parquet_format`) into pyiceberg FileIO output streams,
one path for every store (local disk or S3 with the catalog's ``s3.*`` properties); the
location is checked, and files of failed attempts swept, through :mod:`sparklink.storage`
(:mod:`sparklink.iceberg.sweep`).
A partitioned table (identity transforms only) gets one file per partition value in this task,
under ``data/<col>=<value>/``. A written file is invisible to Iceberg readers until the
driver's commit adds it to a snapshot.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import BinaryIO, cast
from urllib.parse import quote

import pyarrow as pa

from sparklink.errors import ConfigError
from sparklink.faults import fault_point
from sparklink.formats.base import BulkWriter
from sparklink.formats.config import FormatConfig
from sparklink.formats.partitioning import split_by_columns
from sparklink.iceberg.data_files import encode_partition_value
from sparklink.sink import Committable, SinkWriter, WriterContext
from sparklink.storage import parse_location
from sparklink.storage.location import MemoryLocation

PARQUET = FormatConfig(name="parquet")  # the format's extension and names; the settings: table_parquet_format
# Iceberg's Parquet write properties and their defaults (Iceberg's TableProperties; pyiceberg's are the same)
CODEC_PROPERTY, LEVEL_PROPERTY = "write.parquet.compression-codec", "write.parquet.compression-level"
ROW_GROUP_PROPERTY, FORMAT_PROPERTY = "write.parquet.row-group-size-bytes", "write.format.default"
ICEBERG_CODECS = {"zstd": "zstd", "snappy": "snappy", "gzip": "gzip", "lz4": "lz4", "brotli": "brotli",
                  "uncompressed": "none"}
DEFAULT_ICEBERG_CODEC = "zstd"


def table_parquet_format(properties: Mapping[str, str], table_name: str) -> FormatConfig:
    """Driver side: the Parquet settings a table's write properties ask for, as Iceberg's own
    writers apply them: ``write.parquet.compression-codec`` (zstd when unset),
    ``write.parquet.compression-level`` (the codec's default when unset; ignored for a codec that
    has no levels, snappy or uncompressed, as Iceberg's writers ignore it, where pyarrow would fail
    every task) and ``write.parquet.row-group-size-bytes`` (128 MiB). A table whose
    ``write.format.default`` is not Parquet, or a value the writer cannot apply, is refused naming
    the property."""
    def refuse(key: str, problem: str, expected: str) -> ConfigError:
        return ConfigError("table", f"Iceberg table {table_name}: table property {key}={properties[key]!r} "
                           f"{problem}", expected)

    if properties.get(FORMAT_PROPERTY, "parquet").lower() != "parquet":
        raise refuse(FORMAT_PROPERTY, "asks for data files sparklink.iceberg does not write", "parquet")
    codec = ICEBERG_CODECS.get(properties.get(CODEC_PROPERTY, DEFAULT_ICEBERG_CODEC).lower())
    if codec is None:
        raise refuse(CODEC_PROPERTY, "is not a Parquet codec", ", ".join(ICEBERG_CODECS))
    level, row_group = properties.get(LEVEL_PROPERTY), properties.get(ROW_GROUP_PROPERTY)
    if level is not None and not level.strip().lstrip("-").isdigit():
        raise refuse(LEVEL_PROPERTY, "is not a whole number", "e.g. 3")
    if row_group is not None and (not row_group.strip().isdigit() or int(row_group) < 1):
        raise refuse(ROW_GROUP_PROPERTY, "is not a positive number of bytes", "e.g. 134217728")
    if codec == "none" or not pa.Codec.supports_compression_level(codec):
        level = None
    return FormatConfig(name="parquet", compression=codec, compression_level=int(level) if level is not None else None,
                        row_group_bytes=int(row_group) if row_group is not None else None)


def check_location(location: str) -> None:
    """Driver side: refuse a table location this sink cannot write (a scheme the storage seam does
    not serve, or its in-process ``memory://`` store, which pyiceberg's FileIO cannot open), before
    any task runs."""
    if isinstance(parse_location("catalog.warehouse", location), MemoryLocation):
        raise ConfigError("catalog.warehouse", f"table location '{location}' is a memory:// store, which pyiceberg's "
                          "FileIO cannot open", "a local warehouse (file:///path) or S3 (s3://bucket/path)")


class _CountingStream:
    """A pyiceberg output stream seen as a Python file whose position survives its close (the
    bulk writer asks for the size after closing)."""

    def __init__(self, stream):
        self.stream = stream
        self.position = 0
        self.closed = False

    def write(self, data) -> int:
        self.stream.write(data)
        self.position += len(data)
        return len(data)

    def flush(self) -> None:
        pass

    def tell(self) -> int:
        return self.position

    def writable(self) -> bool:
        return True

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.stream.close()


def partition_folder(columns: list[str], values: tuple) -> str:
    """The partition's folder as Iceberg's ``PartitionSpec.partitionToPath`` spells it
    (``name=value``, URL-escaped, ``null`` for a null), not Hive's spelling."""
    return "/".join(f"{quote(c, safe='')}={quote('null' if v is None else str(v), safe='')}"
                    for c, v in zip(columns, values, strict=True))


def utc_type(kind: pa.DataType) -> pa.DataType:
    """Iceberg's ``timestamptz`` is UTC: a zoned timestamp (Spark's ``TIMESTAMP`` arrives in the
    session's zone) is relabelled UTC (same instants), nested ones too."""
    if pa.types.is_timestamp(kind) and kind.tz is not None:
        return pa.timestamp("us", tz="UTC")
    if pa.types.is_struct(kind):
        return pa.struct([field.with_type(utc_type(field.type)) for field in kind])
    if pa.types.is_list(kind):
        return pa.list_(kind.value_field.with_type(utc_type(kind.value_type)))
    if pa.types.is_large_list(kind):
        return pa.large_list(kind.value_field.with_type(utc_type(kind.value_type)))
    if pa.types.is_map(kind):
        return pa.map_(kind.key_field.with_type(utc_type(kind.key_type)),
                       kind.item_field.with_type(utc_type(kind.item_type)))
    return kind


def utc_batch(batch: pa.RecordBatch) -> pa.RecordBatch:
    """``batch`` with its zoned timestamps relabelled UTC (itself when it has none)."""
    schema = pa.schema([field.with_type(utc_type(field.type)) for field in batch.schema], metadata=batch.schema.metadata)
    return batch if schema.equals(batch.schema) else batch.cast(schema)


def split_by_partition(batch: pa.RecordBatch, columns: list[str]) -> Iterator[tuple[tuple, pa.RecordBatch]]:
    """``(key, rows)`` for each distinct partition value of ``columns`` (executor side), split by
    the sinks' one routine (:func:`~sparklink.formats.partitioning.split_by_columns`: sorted
    once, never filtered by equality; floats grouped by their bits, so NaN rows are kept and
    ``0.0`` / ``-0.0`` are two partitions, as Iceberg's identity transform keeps them)."""
    for part in split_by_columns(batch, columns):
        yield tuple(_folder_value(part.column(c)[0]) for c in columns), part


def _folder_value(scalar: pa.Scalar):
    value = scalar.as_py()
    if isinstance(value, float) and (value != value or value == 0.0):
        return float(value).hex()  # NaN, 0.0 and -0.0 stay apart in keys and folder names
    if isinstance(value, bytes):
        return value.hex()  # the folder says the bytes, not a Python repr (b'ab')
    return value


@dataclass(frozen=True)
class PartitionTransform:
    """One field of the table's partition spec as the executors apply it (picklable): the input
    column, the transform (``day``, ``bucket[16]``, ...), the partition field's name and the
    source field's Iceberg type (JSON)."""

    column: str
    transform: str
    name: str
    source_type: str

    def apply(self, values: pa.ChunkedArray | pa.Array) -> pa.Array:
        """The partition values of ``values`` (pyiceberg's transform on Arrow, ``pyiceberg-core``)."""
        from pydantic import TypeAdapter
        from pyiceberg.transforms import parse_transform
        from pyiceberg.types import IcebergType

        source = TypeAdapter(IcebergType).validate_json(self.source_type)
        array = values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values
        transformed = parse_transform(self.transform).pyarrow_transform(source)(array)
        return transformed.combine_chunks() if isinstance(transformed, pa.ChunkedArray) else transformed


_PART = "__sparklink_partition_"


class IcebergWriter(SinkWriter):
    """Stages one task's rows as Parquet files; committables name them (``file`` is the full URI
    the commit adds, ``rows`` the record count, ``partition`` the exact identity partition values).
    ``skip``: a ``df.write`` whose ``txnAppId`` / ``txnVersion`` is already committed writes nothing."""

    def __init__(self, location: str, partition_columns: list[str], context: WriterContext,
                 io_properties: dict[str, str] | None = None, *, skip: bool = False, owner: str = "",
                 changes: bool = False, version: int | None = None,
                 transforms: list[PartitionTransform] | None = None, parquet: FormatConfig):
        self.location = location.rstrip("/")
        self.parquet = parquet  # the table's write properties (table_parquet_format)
        self.data_dir = PurePosixPath("data")
        self.io_properties = dict(io_properties or {})
        self.partition_columns = partition_columns
        self.transforms = transforms or []  # a spec with a transform other than identity (else empty)
        self.context = context
        batch = context.batch_id if context.batch_id is not None else version  # a df.write's txnVersion
        tag = f"b{batch:08d}" if batch is not None else f"j{context.job_id[:16]}"
        kind = "changes-" if changes else ""
        owner = f"{owner}-" if owner else ""
        self.prefix = f"{owner}{kind}{tag}-p{context.partition_id:05d}-a{context.attempt_number}-{uuid.uuid4().hex}"
        self.changes = changes
        self.writers: dict[tuple, tuple[PurePosixPath, BulkWriter]] = {}
        self.rows: dict[tuple, int] = {}
        self.partition_values: dict[tuple, list] = {}  # the exact values (data_files.encode_partition_value)
        self.skip = skip
        self.finished: list[Committable] = []

    def _writer(self, key: tuple, schema: pa.Schema) -> BulkWriter:
        if key not in self.writers:
            folder = self.data_dir
            if self.transforms:
                folder = folder / partition_folder([t.name for t in self.transforms], key)
            elif self.partition_columns:
                folder = folder / partition_folder(self.partition_columns, key)
            path = folder / f"{self.prefix}-{len(self.writers):05d}{PARQUET.extension}"
            # one path for every store: pyiceberg's FileIO (local disk or S3, the catalog's s3.* properties);
            # _CountingStream has the file methods the bulk writer uses (write, flush, tell, close)
            stream = file_io(self.io_properties, self.location).new_output(self._uri(path)).create(overwrite=True)
            self.writers[key] = (path, self.parquet.bulk_writer(cast(BinaryIO, _CountingStream(stream)), schema))
            self.rows[key] = 0
        return self.writers[key][1]

    def write_batch(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows == 0 or self.skip:
            return
        batch = utc_batch(batch)
        if self.transforms:
            self._write_transformed(batch)
            return
        if not self.partition_columns:
            self._writer((), batch.schema).write_batch(batch)
            self.rows[()] += batch.num_rows
            return
        for key, part in split_by_partition(batch, self.partition_columns):
            writer = self._writer(key, batch.schema)
            if key not in self.partition_values:
                self.partition_values[key] = [encode_partition_value(part.column(c)[0]) for c in self.partition_columns]
            writer.write_batch(part)
            self.rows[key] += part.num_rows

    def _write_transformed(self, batch: pa.RecordBatch) -> None:
        """Rows grouped by the spec's transformed values (one file per partition in this task)."""
        keys = [f"{_PART}{i}" for i in range(len(self.transforms))]
        keyed = batch
        for name, transform in zip(keys, self.transforms, strict=True):
            keyed = keyed.append_column(name, transform.apply(batch.column(transform.column)))
        for key, part in split_by_partition(keyed, keys):
            if key not in self.partition_values:
                self.partition_values[key] = [encode_partition_value(part.column(k)[0]) for k in keys]
            rows = part.drop_columns(keys)
            writer = self._writer(key, batch.schema)
            writer.write_batch(rows)
            self.rows[key] += rows.num_rows

    def flush(self) -> None:
        for key, (path, writer) in list(self.writers.items()):
            size = writer.close()
            committable: Committable = {"file": self._uri(path), "rows": self.rows[key], "bytes": size,
                                        "job": self.context.job_id}
            if self.changes:
                committable |= {"changes": True, "task": self.context.partition_id, "index": len(self.finished)}
            if self.partition_columns or self.transforms:
                committable["partition"] = self.partition_values[key]
            self.finished.append(committable)
        self.writers.clear()

    def _uri(self, path: PurePosixPath) -> str:
        return f"{self.location}/{path.as_posix()}"

    def prepare_commit(self) -> list[Committable]:
        fault_point("iceberg.after_write", batch_id=self.context.batch_id, attempt=self.context.attempt_number)
        return list(self.finished)

    def abort(self) -> None:
        for path, writer in self.writers.values():
            try:
                writer.close()
            finally:
                remove_data_file(self._uri(path), self.io_properties)
        self.writers.clear()
        for committable in self.finished:
            remove_data_file(committable["file"], self.io_properties)
        self.finished.clear()

    def close(self) -> None:
        for _path, writer in self.writers.values():
            writer.close()
        self.writers.clear()


def file_io(properties: dict[str, str], location: str):
    from pyiceberg.io import load_file_io

    return load_file_io(properties, location)


def remove_data_file(uri: str, io_properties: dict[str, str]) -> None:
    """Remove a data file that will never be committed (a missing file is fine)."""
    try:
        file_io(io_properties, uri).delete(uri)
    except FileNotFoundError:
        pass
