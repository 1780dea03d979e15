"""Data files of the Delta sink (executor side): Parquet files of one task, one per partition
value and size, with the file sink's Parquet bulk writer (row groups sized by bytes), into local
files or S3 multipart uploads (:mod:`sparklink.delta.table_location`).

A committable describes one closed data file (relative path, size, partition values, row count,
statistics): what the driver's committer turns into an ``add`` action.

File names carry who wrote them: ``part-<tag>-b<batch>-p<partition>-a<attempt>-<random>.parquet``,
where the tag is the stream's application id (its checkpoint's, see :mod:`sparklink.delta.app_id`)
or ``j<job id>`` for ``df.write``. That is what lets the sink prove a file is its own failed
attempt's (:meth:`sparklink.delta.sink.DeltaSink.post_commit`).
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from datetime import datetime, time

import pyarrow as pa
import pyarrow.compute as pc

from sparklink.delta.table_location import DataFile, TableLocation
from sparklink.faults import fault_point
from sparklink.formats.config import FormatConfig
from sparklink.sink.writer import Committable, SinkWriter, WriterContext

_SAFE_VALUE = re.compile(r"^[A-Za-z0-9_.\-]+$")
HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"


def file_tag(app_id: str | None, job_id: str) -> str:
    """The writer's tag in a file name: a short hash of the stream's app id, or the job id."""
    if app_id is not None:
        return "s" + hashlib.sha256(app_id.encode()).hexdigest()[:16]
    return "j" + job_id[:16]


def batch_prefix(tag: str, batch_id: int | None) -> str:
    return f"part-{tag}-b{batch_id:08d}-" if batch_id is not None else f"part-{tag}-"


def partition_value_text(value: object) -> str | None:
    """A partition value as Delta's log spells it (None for null)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (datetime, time)):  # what Arrow gives for timestamp and time columns
        return value.strftime("%Y-%m-%d %H:%M:%S.%f")
    return str(value)


def partition_directory(columns: tuple[str, ...], values: tuple[str | None, ...]) -> str:
    """Hive-style directories where every value is plain; otherwise none (Delta readers take
    partition values from the log, never from paths, so a file may live anywhere in the table)."""
    if not columns:
        return ""
    parts = []
    for column, value in zip(columns, values, strict=False):
        text = HIVE_NULL if value is None else value
        if not _SAFE_VALUE.match(text) or not _SAFE_VALUE.match(column):
            return ""
        parts.append(f"{column}={text}")
    return "/".join(parts) + "/"


def file_stats(table: pa.Table) -> dict:
    """Delta statistics of one file: rows, nulls per top-level column, min/max of integer and
    date columns (types whose order every engine agrees on)."""
    stats: dict = {"numRecords": table.num_rows, "nullCount": {}, "minValues": {}, "maxValues": {}}
    for name, column in zip(table.column_names, table.columns, strict=False):
        if pa.types.is_nested(column.type):
            continue
        stats["nullCount"][name] = column.null_count
        if (pa.types.is_integer(column.type) or pa.types.is_date32(column.type)) and column.null_count < len(column):
            low, high = pc.min_max(column).values()
            stats["minValues"][name] = low.as_py() if pa.types.is_integer(column.type) else str(low.as_py())
            stats["maxValues"][name] = high.as_py() if pa.types.is_integer(column.type) else str(high.as_py())
    return stats


def utc_schema(schema: pa.Schema) -> pa.Schema:
    """Delta's TIMESTAMP is UTC: zoned timestamp columns are relabelled UTC (same instants)."""
    fields = []
    for field in schema:
        if pa.types.is_timestamp(field.type) and field.type.tz is not None:
            field = field.with_type(pa.timestamp("us", tz="UTC"))
        fields.append(field)
    return pa.schema(fields)


class _OpenFile:
    def __init__(self, table: TableLocation, relative: str, schema: pa.Schema, parquet: FormatConfig,
                 partition: dict[str, str | None]):
        self.relative = relative
        self.file = table.open_data_file(relative)
        self.writer = parquet.bulk_writer(self.file.output, schema)
        self.partition = partition
        self.parts: list[dict] = []

    def write(self, table: pa.Table) -> None:
        for batch in table.to_batches():
            self.writer.write_batch(batch)
        self.parts.append(file_stats(table))

    def close(self) -> Committable:
        size = self.writer.close()
        return {"path": self.relative, "size": size, "partitionValues": self.partition,
                "modificationTime": self.file.finish(), "stats": json.dumps(merge_stats(self.parts))}


def merge_stats(parts: list[dict]) -> dict:
    merged: dict = {"numRecords": 0, "nullCount": {}, "minValues": {}, "maxValues": {}}
    for part in parts:
        merged["numRecords"] += part["numRecords"]
        for name, count in part["nullCount"].items():
            merged["nullCount"][name] = merged["nullCount"].get(name, 0) + count
        for name, value in part["minValues"].items():
            merged["minValues"][name] = min(value, merged["minValues"].get(name, value))
        for name, value in part["maxValues"].items():
            merged["maxValues"][name] = max(value, merged["maxValues"].get(name, value))
    return merged


class DeltaFileWriter(SinkWriter):
    """One write task (executor side): splits each Arrow batch by partition values and streams
    it into that partition's open Parquet file; a file is closed once it reaches
    ``target_file_size`` bytes and another is opened."""

    def __init__(self, *, table: TableLocation, context: WriterContext, tag: str, partition_columns: tuple[str, ...],
                 target_file_size: int, parquet: FormatConfig):
        self.table = table
        self.context = context
        self.prefix = batch_prefix(tag, context.batch_id)
        self.partition_columns = partition_columns
        self.target_file_size = target_file_size
        self.parquet = parquet
        self.open: dict[tuple, _OpenFile] = {}
        self.closed: list[Committable] = []
        self.written: list[DataFile] = []

    def _new_file(self, key: tuple, schema: pa.Schema) -> _OpenFile:
        directory = partition_directory(self.partition_columns, key)
        name = (f"{directory}{self.prefix}p{self.context.partition_id:05d}-a{self.context.attempt_number}-"
                f"{uuid.uuid4().hex[:12]}.{self.parquet.codec}{self.parquet.extension}")
        handle = _OpenFile(self.table, name, schema, self.parquet, dict(zip(self.partition_columns, key, strict=False)))
        self.written.append(handle.file)
        return handle

    def _write(self, key: tuple, table: pa.Table) -> None:
        handle = self.open.get(key)
        if handle is None:
            handle = self.open[key] = self._new_file(key, table.schema)
        handle.write(table)
        if handle.writer.size() >= self.target_file_size:
            self.closed.append(handle.close())
            del self.open[key]

    def write_batch(self, batch: pa.RecordBatch) -> None:
        table = pa.Table.from_batches([batch])
        table = table.cast(utc_schema(table.schema))
        if not self.partition_columns:
            self._write((), table)
            return
        data = table.drop_columns(list(self.partition_columns))
        keys = table.select(list(self.partition_columns)).group_by(list(self.partition_columns)).aggregate([])
        for row in keys.to_pylist():
            mask = None
            for column in self.partition_columns:
                value = row[column]
                condition = pc.is_null(table[column]) if value is None else pc.equal(table[column], value)
                mask = condition if mask is None else pc.and_(mask, condition)
            key = tuple(partition_value_text(row[c]) for c in self.partition_columns)
            self._write(key, data.filter(mask))

    def flush(self) -> None:
        for key in list(self.open):
            self.closed.append(self.open.pop(key).close())
        if self.closed:
            fault_point("delta.writer.after_files", batch_id=self.context.batch_id, attempt=self.context.attempt_number)

    def prepare_commit(self) -> list[Committable]:
        return list(self.closed)

    def abort(self) -> None:
        """The task failed: remove every file this attempt wrote (none is in any commit). Open
        files are closed first (on S3 that uploads the last part, never completes the upload),
        so that no writer is left to flush into a removed file later; then local files are
        deleted, and on S3 uploads aborted and completed objects deleted."""
        for handle in self.open.values():
            try:
                handle.writer.close()
            except (OSError, ValueError):  # StorageError is an OSError; the task failed already
                pass
        self.open.clear()
        for data_file in self.written:
            data_file.discard()

    def close(self) -> None:
        for handle in self.open.values():
            handle.writer.close()
        self.open.clear()
