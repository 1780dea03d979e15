"""Executor side: one task's Arrow batches into Parquet data files under the table's location.

Files are written with the file sink's Parquet bulk writer (:mod:`sparklink.formats.parquet`,
picked by :class:`sparklink.formats.config.FormatConfig`): to local files for a ``file:``
location, into pyiceberg FileIO output streams (the catalog's ``s3.*`` properties) for ``s3:``.
A partitioned table (identity transforms only) gets one file per partition value in this task,
under ``data/<col>=<value>/``. A written file is invisible to Iceberg readers until the
driver's commit adds it to a snapshot.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import BinaryIO, cast
from urllib.parse import quote, unquote, urlparse

import pyarrow as pa
import pyarrow.compute as pc

from sparklink.errors import ConfigError
from sparklink.faults import fault_point
from sparklink.formats.base import BulkWriter
from sparklink.formats.config import FormatConfig
from sparklink.sink import Committable, SinkWriter, WriterContext

PARQUET = FormatConfig(name="parquet")


OBJECT_STORE_SCHEMES = ("s3", "s3a", "s3n")


def is_local(location: str) -> bool:
    return urlparse(location).scheme in ("", "file")


def local_directory(location: str) -> Path:
    """The local folder of a ``file:`` (or plain path) table location; other schemes are refused."""
    parsed = urlparse(location)
    if parsed.scheme in ("", "file"):
        return Path(unquote(parsed.path))
    raise ConfigError("catalog.warehouse", f"table location '{location}' has scheme '{parsed.scheme}', which this "
                      "sink does not write", "a local warehouse (file:///path) or S3 (s3://bucket/path)")


def check_location(location: str) -> None:
    """Driver side: refuse a table location this sink cannot write, before any task runs."""
    if not is_local(location) and urlparse(location).scheme not in OBJECT_STORE_SCHEMES:
        local_directory(location)


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
    return "/".join(f"{quote(c, safe='')}={quote('null' if v is None else str(v), safe='')}"
                    for c, v in zip(columns, values, strict=True))


class IcebergWriter(SinkWriter):
    """Stages one task's rows as Parquet files; committables name them (``file`` is the full URI
    the commit adds, ``rows`` the record count)."""

    def __init__(self, location: str, partition_columns: list[str], context: WriterContext,
                 io_properties: dict[str, str] | None = None):
        self.location = location.rstrip("/")
        self.local = is_local(self.location)
        self.data_dir = local_directory(self.location) / "data" if self.local else Path("/data")
        self.io_properties = dict(io_properties or {})
        self.partition_columns = partition_columns
        self.context = context
        tag = f"b{context.batch_id:08d}" if context.batch_id is not None else f"j{context.job_id[:16]}"
        self.prefix = f"{tag}-p{context.partition_id:05d}-a{context.attempt_number}-{uuid.uuid4().hex}"
        self.writers: dict[tuple, tuple[Path, BulkWriter]] = {}
        self.rows: dict[tuple, int] = {}
        self.finished: list[Committable] = []

    def _writer(self, key: tuple, schema: pa.Schema) -> BulkWriter:
        if key not in self.writers:
            folder = self.data_dir
            if self.partition_columns:
                folder = folder / partition_folder(self.partition_columns, key)
            path = folder / f"{self.prefix}-{len(self.writers):05d}{PARQUET.extension}"
            if self.local:
                folder.mkdir(parents=True, exist_ok=True)
                self.writers[key] = (path, PARQUET.bulk_writer(path, schema))
            else:
                stream = file_io(self.io_properties, self.location).new_output(self._uri(path)).create(overwrite=True)
                # _CountingStream has the file methods the bulk writer uses (write, flush, tell, close)
                self.writers[key] = (path, PARQUET.bulk_writer(cast(BinaryIO, _CountingStream(stream)), schema))
            self.rows[key] = 0
        return self.writers[key][1]

    def write_batch(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows == 0:
            return
        if not self.partition_columns:
            self._writer((), batch.schema).write_batch(batch)
            self.rows[()] += batch.num_rows
            return
        table = pa.Table.from_batches([batch])
        keys = table.select(self.partition_columns).group_by(self.partition_columns).aggregate([])
        for key in zip(*(keys.column(c).to_pylist() for c in self.partition_columns), strict=True):
            mask = None
            for column, value in zip(self.partition_columns, key, strict=True):
                match = pc.is_null(table.column(column)) if value is None else pc.equal(table.column(column), value)
                mask = match if mask is None else pc.and_(mask, match)
            part = table.filter(mask)
            writer = self._writer(key, batch.schema)
            for piece in part.to_batches():
                writer.write_batch(piece)
            self.rows[key] += part.num_rows

    def flush(self) -> None:
        for key, (path, writer) in list(self.writers.items()):
            size = writer.close()
            self.finished.append({"file": self._uri(path),
                                  "rows": self.rows[key], "bytes": size, "job": self.context.job_id})
        self.writers.clear()

    def _uri(self, path: Path) -> str:
        return f"{self.location}/data/{path.relative_to(self.data_dir).as_posix()}"

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
    if is_local(uri):
        local_directory(uri).unlink(missing_ok=True)
        return
    io = file_io(io_properties, uri)
    if io.new_input(uri).exists():
        io.delete(uri)
