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

import pyarrow as pa
import pyarrow.compute as pc

from sparklink.delta.invariants import check_not_null
from sparklink.delta.partition_values import partition_value_text
from sparklink.delta.table_location import DataFile, TableLocation
from sparklink.faults import fault_point
from sparklink.formats.config import FormatConfig
from sparklink.formats.partitioning import HIVE_NULL, split_by_columns
from sparklink.sink.writer import Committable, SinkWriter, WriterContext

_SAFE_VALUE = re.compile(r"^[A-Za-z0-9_.\-]+$")
# writeMode=upsert: the tasks' changes, read by the driver's MERGE, never referenced by the table
STAGED_DIRECTORY = "_sparklink/staged-changes/"


def file_tag(app_id: str | None, job_id: str) -> str:
    """The writer's tag in a file name: a short hash of the stream's app id, or the job id."""
    if app_id is not None:
        return "s" + hashlib.sha256(app_id.encode()).hexdigest()[:16]
    return "j" + job_id[:16]


def batch_prefix(tag: str, batch_id: int | None) -> str:
    return f"part-{tag}-b{batch_id:08d}-" if batch_id is not None else f"part-{tag}-"


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


class OpenDataFile:
    """One data file being written (executor, and the driver's compaction): Parquet into a local
    file or an S3 upload; :meth:`close` returns its committable (``notNull``: the NOT NULL columns
    the writer checked, when it checked them)."""

    def __init__(self, table: TableLocation, relative: str, schema: pa.Schema, parquet: FormatConfig,
                 partition: dict[str, str | None], not_null: tuple[str, ...] | None = None):
        self.relative = relative
        self.not_null = not_null
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
        committable = {"path": self.relative, "size": size, "partitionValues": self.partition,
                       "modificationTime": self.file.finish(), "stats": json.dumps(merge_stats(self.parts))}
        if self.not_null is not None:  # the NOT NULL columns the task checked (the committer compares)
            committable["notNull"] = list(self.not_null)
        return committable


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
                 target_file_size: int, parquet: FormatConfig, not_null: tuple[str, ...] = (), directory: str = "",
                 extra: dict | None = None):
        self.table = table
        self.directory = directory  # under the table's root ("" or ending in "/"): staged changes go elsewhere
        self.extra = extra or {}  # added to every committable
        self.not_null = not_null
        self.context = context
        self.prefix = batch_prefix(tag, context.batch_id)
        self.partition_columns = partition_columns
        self.target_file_size = target_file_size
        self.parquet = parquet
        self.open: dict[tuple, OpenDataFile] = {}
        self.closed: list[Committable] = []
        self.written: list[DataFile] = []

    def _new_file(self, key: tuple, schema: pa.Schema) -> OpenDataFile:
        directory = self.directory + partition_directory(self.partition_columns, key)
        name = (f"{directory}{self.prefix}p{self.context.partition_id:05d}-a{self.context.attempt_number}-"
                f"{uuid.uuid4().hex[:12]}.{self.parquet.codec}{self.parquet.extension}")
        handle = OpenDataFile(self.table, name, schema, self.parquet, dict(zip(self.partition_columns, key, strict=False)),
                           self.not_null)
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
        if self.not_null:
            check_not_null(batch, self.not_null, self.table.uri())
        batch = batch.cast(utc_schema(batch.schema))
        if not self.partition_columns:
            self._write((), pa.Table.from_batches([batch]))
            return
        # rows grouped by their partition values, sorted once (sparklink.formats.partitioning):
        # null, NaN, 0.0 and -0.0 are each a group of their own, every row is in exactly one
        for part in split_by_columns(batch, self.partition_columns):
            key = tuple(partition_value_text(part.column(c)[0].as_py(), c) for c in self.partition_columns)
            self._write(key, pa.Table.from_batches([part.drop_columns(list(self.partition_columns))]))

    def flush(self) -> None:
        for key in list(self.open):
            self.closed.append(self.open.pop(key).close())
        if self.closed:
            fault_point("delta.writer.after_files", batch_id=self.context.batch_id, attempt=self.context.attempt_number)

    def prepare_commit(self) -> list[Committable]:
        """The closed files; staged changes (``extra`` given) say the order they were written in
        (``order``: task partition id, then file number: the batch's row order, which
        ``writeMode=upsert`` needs)."""
        if not self.extra:
            return list(self.closed)
        return [{**committable, **self.extra, "order": [self.context.partition_id, number]}
                for number, committable in enumerate(self.closed)]

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
