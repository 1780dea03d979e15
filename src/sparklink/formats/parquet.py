"""Parquet (executor side), through ``pyarrow.parquet``.

Writing (:class:`ParquetBulkWriter`): the file sink's bulk files, compaction's output and the
Delta and Iceberg data files; settings follow parquet-mr as Spark uses it.

Reading (:class:`ParquetFormat`): whole files or ranges of row groups. Only the requested
columns are read; the schema comes from the footer. Batch size: ``batchSize`` rows when set; otherwise sized from the footer so that a batch holds
about ``BATCH_TARGET_BYTES`` of decoded data of the requested columns (at least the row-format
default, at most ``MAX_AUTO_BATCH_ROWS`` rows). Spark's Python data source path costs a fixed
amount per Arrow batch, so few large batches are much faster than many small ones (measured in
``bench/bench_file_source.py``), while the byte target bounds the memory of wide files. A local
file is memory-mapped and its row groups decoded in place. An object (S3) is read a row group at
a time with pyarrow's pre-buffering: the column chunks one row group needs are fetched in a few
coalesced ranged GETs, decoded, and dropped before the next row group's are fetched, so a task
holds one row group's compressed chunks at most. (Pre-buffering every row group of a task at
once holds them all until the task ends: 235 MB of resident memory for a 99 MB file against
117 MB a row group at a time, at the same CPU.) Against the earlier read-ahead, which fetched 4
MiB blocks ahead of the decoder through a Python file object, this costs less CPU on both sides
of the connection, where on two busy cores every CPU second is wall time: the ``users`` shape's
2,000,000 rows from SeaweedFS, 10 reads in one Spark session each, Python workers 0.60-0.64
CPU-s a read against 0.67-0.78, the store 0.12-0.15 against 0.14-0.17, median wall 0.83-0.87 s
against 0.90-1.01 s (three sessions of each, alternating, with a task's row groups pre-buffered
all at once; a row group at a time, two sessions: 0.61-0.65, 0.15-0.16, 0.89-0.95 s, beside the
direct pyarrow reader's 0.52-0.65, 0.11-0.14, 0.82-0.96 s in the same sessions).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, BinaryIO

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from sparklink.formats.base import FileFormat, NativeFileWriter, SegmentInput
from sparklink.formats.options import BATCH_TARGET_BYTES, DEFAULT_BATCH_ROWS, MAX_AUTO_BATCH_ROWS
from sparklink.formats.read_config import ReadConfig
from sparklink.storage.file_input import arrow_input

# ---------------------------------------------------------------------------------- writing


# parquet-mr decides on a column's dictionary after its first page (1 MiB, 131,072 longs)
DICTIONARY_SAMPLE_ROWS = 131_072


def dictionary_columns(table: pa.Table) -> list[str] | bool:
    """The columns worth a dictionary, judged on the first rows as parquet-mr judges its first
    page: a column whose dictionary plus indices would not be smaller than its plain values
    (mostly distinct ids, measurements) is written plain. pyarrow alone keeps a dictionary
    until it reaches 1 MiB, which made such columns 10-40 % larger than Spark's. With a
    nested column every column keeps its dictionary (pyarrow names nested leaves by path)."""
    if any(pa.types.is_nested(field.type) for field in table.schema):
        return True
    sample = table.slice(0, DICTIONARY_SAMPLE_ROWS)
    chosen = []
    for name, column in zip(sample.column_names, sample.columns, strict=False):
        kind = column.type
        values = len(column) - column.null_count
        if values == 0 or not (pa.types.is_primitive(kind) or pa.types.is_decimal(kind) or pa.types.is_string(kind)
                               or pa.types.is_binary(kind) or pa.types.is_large_string(kind)
                               or pa.types.is_large_binary(kind)) or pa.types.is_boolean(kind):
            chosen.append(name)
            continue
        distinct = pc.unique(column.drop_null())
        if pa.types.is_primitive(kind) or pa.types.is_decimal(kind):
            width = max(1, kind.bit_width // 8)
            plain, dictionary = values * width, len(distinct) * width
        else:
            plain = (pc.sum(pc.binary_length(column)).as_py() or 0) + 4 * values
            dictionary = (pc.sum(pc.binary_length(distinct)).as_py() or 0) + 4 * len(distinct)
        indices = values * max(1, (len(distinct) - 1).bit_length()) / 8
        if dictionary + indices < plain:
            chosen.append(name)
    return chosen


class ParquetBulkWriter(NativeFileWriter):
    """Parquet through pyarrow, one row group per ``row_group_bytes`` of buffered Arrow data
    (or per ``row_group_rows`` rows).

    Record batches are kept as they arrive (no copy); a full row group is handed to pyarrow
    as one table, which encodes its chunks into one row group with one dictionary per column
    chunk. Settings follow parquet-mr as Spark uses it: dictionaries where they pay
    (:func:`dictionary_columns`, decided at the file's first row group), 1 MiB dictionary and
    data pages, statistics, v1 data pages.
    """

    def __init__(self, path: Path | BinaryIO, schema: pa.Schema, codec: str, *, row_group_bytes: int | None,
                 row_group_rows: int | None, compression_level: int | None = None):
        super().__init__(path)
        self.schema = schema
        self.codec = codec
        self.compression_level = compression_level  # None: the codec's own default
        self.row_group_bytes = row_group_bytes
        self.row_group_rows = row_group_rows
        self.writer: pq.ParquetWriter | None = None  # opened at the first row group
        self.pending: list[pa.RecordBatch] = []
        self.pending_rows = 0
        self.pending_bytes = 0
        self.written_arrow_bytes = 0
        self.row_groups = 0

    def _open(self, dictionary: list[str] | bool) -> pq.ParquetWriter:
        return pq.ParquetWriter(self.sink, self.schema, compression=self.codec,
                                compression_level=self.compression_level, use_dictionary=dictionary,
                                write_statistics=True, data_page_size=1024 * 1024,
                                dictionary_pagesize_limit=1024 * 1024)

    def write_batch(self, batch: pa.RecordBatch) -> None:
        self.pending.append(batch)
        self.pending_rows += batch.num_rows
        self.pending_bytes += batch.nbytes
        if self.row_group_rows is not None:
            if self.pending_rows >= self.row_group_rows:
                self._write_full_row_groups(self.row_group_rows)
        elif self.row_group_bytes is not None and self.pending_bytes >= self.row_group_bytes:
            self.release()

    def _write_full_row_groups(self, row_group_rows: int) -> None:
        table = pa.Table.from_batches(self.pending)
        full = self.pending_rows - self.pending_rows % row_group_rows
        self._write(table.slice(0, full), row_group_rows)
        self.pending = table.slice(full).to_batches()
        self.pending_rows = self.pending_rows - full
        self.pending_bytes = sum(b.nbytes for b in self.pending)

    def _write(self, table: pa.Table, rows_per_group: int) -> None:
        if self.writer is None:
            self.writer = self._open(dictionary_columns(table))
        self.writer.write_table(table, row_group_size=rows_per_group)
        self.written_arrow_bytes += table.nbytes
        self.row_groups += -(-table.num_rows // rows_per_group)

    def release(self) -> bool:
        if self.pending_rows:
            self._write(pa.Table.from_batches(self.pending), self.pending_rows)
        self.pending, self.pending_rows, self.pending_bytes = [], 0, 0
        return True

    def buffered_bytes(self) -> int:
        return self.pending_bytes

    def size(self) -> int:
        """Bytes written, plus the buffered Arrow bytes scaled by this file's encoded/Arrow
        ratio so far (1:1 before its first row group, so the estimate errs high)."""
        written = self.sink.tell()
        ratio = written / self.written_arrow_bytes if self.written_arrow_bytes else 1.0
        return written + int(self.pending_bytes * ratio)

    def close(self) -> int:
        self.release()
        if self.writer is None:  # no rows: a valid file with the schema and no row group
            self.writer = self._open(True)
        self.writer.close()
        return self._finish_sink()


def file_batches(source: Any) -> Iterator[pa.RecordBatch]:
    """A whole file's rows, streamed in batches of about ``BATCH_TARGET_BYTES`` decoded, decoded
    on the calling thread: a task holds one batch, not the file, and hands each over while the
    next is decoded. ``source`` is a random-access file. The Delta source's reader and compaction
    read whole files with it."""
    with pq.ParquetFile(source) as handle:
        batch_rows = auto_batch_rows(handle.metadata, handle.schema_arrow.names, range(handle.num_row_groups))
        yield from handle.iter_batches(batch_size=batch_rows, use_threads=False)


def read_table(source: Any, name: str) -> pa.Table:
    """A whole file (``sparklink verify``)."""
    return pq.read_table(source)


def read_metadata(source: Any) -> pq.FileMetaData:
    """The footer of a file (the file source's planning: row group sizes)."""
    return pq.ParquetFile(source).metadata


# ---------------------------------------------------------------------------------- reading



def auto_batch_rows(metadata: pq.FileMetaData, columns: Sequence[str], groups: Sequence[int]) -> int:
    """Rows per batch giving about ``BATCH_TARGET_BYTES`` of the ``columns`` (uncompressed sizes)."""
    wanted = set(columns)
    rows, size = 0, 0
    for index in groups:
        group = metadata.row_group(index)
        rows += group.num_rows
        for c in range(group.num_columns):
            column = group.column(c)
            if column.path_in_schema.split(".", 1)[0] in wanted:
                size += column.total_uncompressed_size
    if rows == 0 or size == 0:
        return DEFAULT_BATCH_ROWS
    return max(DEFAULT_BATCH_ROWS, min(MAX_AUTO_BATCH_ROWS, BATCH_TARGET_BYTES * rows // size))


class ParquetFormat(FileFormat):
    name = "parquet"

    def infer_schema(self, path: str, config: ReadConfig) -> pa.Schema:
        with arrow_input(path, config.s3) as file:
            return pq.read_schema(file)

    def read(self, source: SegmentInput) -> Iterator[pa.RecordBatch]:
        segment = source.segment
        with arrow_input(segment.path, source.config.s3) as file:
            fetched = not isinstance(file, str)  # an object (S3, or its bytes in memory), not a local path
            with pq.ParquetFile(file, memory_map=True, pre_buffer=fetched) as handle:
                present = set(handle.schema_arrow.names)
                columns = [name for name in source.data_schema.names if name in present]
                groups = list(range(handle.num_row_groups))
                if segment.unit == "row_groups":
                    groups = list(range(segment.start or 0, segment.end or handle.num_row_groups))
                if not columns:  # only partition columns are wanted: count rows without reading data
                    rows = sum(handle.metadata.row_group(i).num_rows for i in groups)
                    if rows:
                        yield pa.record_batch([pa.nulls(rows)], names=["__rows__"])
                    return
                if not groups:
                    return
                batch_rows = source.config.batch_size or auto_batch_rows(handle.metadata, columns, groups)
                # an object is read a row group at a time: one row group's column chunks fetched and held
                for run in ([group] for group in groups) if fetched else [groups]:
                    yield from handle.iter_batches(batch_size=batch_rows, row_groups=run, columns=columns,
                                                   use_threads=False)
