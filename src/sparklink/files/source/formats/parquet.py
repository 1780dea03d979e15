"""Parquet (executor side): whole files or ranges of row groups, read with ``pyarrow.parquet``.
Only the requested columns are read; the schema comes from the footer.

Batch size: ``batchSize`` rows when set; otherwise sized from the footer so that a batch holds
about ``BATCH_TARGET_BYTES`` of decoded data of the requested columns (at least the row-format
default, at most ``MAX_AUTO_BATCH_ROWS`` rows). Spark's Python data source path costs a fixed
amount per Arrow batch, so few large batches are much faster than many small ones (measured in
``bench/bench_file_source.py``), while the byte target bounds the memory of wide files.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from sparklink.files.source.config import BATCH_TARGET_BYTES, DEFAULT_BATCH_ROWS, MAX_AUTO_BATCH_ROWS, FileSourceConfig
from sparklink.files.source.file_input import arrow_input
from sparklink.files.source.formats.base import FileFormat, SegmentInput


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

    def infer_schema(self, path: str, config: FileSourceConfig) -> pa.Schema:
        with arrow_input(path, config.s3) as file:
            return pq.read_schema(file)

    def read(self, source: SegmentInput) -> Iterator[pa.RecordBatch]:
        segment = source.segment
        with arrow_input(segment.path, source.config.s3) as file, pq.ParquetFile(file, memory_map=True) as handle:
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
            yield from handle.iter_batches(batch_size=batch_rows, row_groups=groups, columns=columns,
                                           use_threads=False)
