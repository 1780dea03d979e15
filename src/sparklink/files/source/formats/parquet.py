"""Parquet (executor side): whole files or ranges of row groups, read with ``pyarrow.parquet``.
Only the requested columns are read; the schema comes from the footer."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from sparklink.files.source.config import FileSourceConfig
from sparklink.files.source.formats.base import FileFormat, SegmentInput


class ParquetFormat(FileFormat):
    name = "parquet"

    def infer_schema(self, path: str, config: FileSourceConfig) -> pa.Schema:
        return pq.read_schema(path)

    def read(self, source: SegmentInput) -> Iterator[pa.RecordBatch]:
        segment = source.segment
        with pq.ParquetFile(segment.path) as handle:
            present = set(handle.schema_arrow.names)
            columns = [name for name in source.data_schema.names if name in present]
            row_groups = None
            if segment.unit == "row_groups":
                row_groups = list(range(segment.start or 0, segment.end or handle.num_row_groups))
            if not columns:  # only partition columns are wanted: count rows without reading data
                groups = row_groups if row_groups is not None else range(handle.num_row_groups)
                rows = sum(handle.metadata.row_group(i).num_rows for i in groups)
                if rows:
                    yield pa.record_batch([pa.nulls(rows)], names=["__rows__"])
                return
            yield from handle.iter_batches(batch_size=source.config.batch_size, row_groups=row_groups, columns=columns,
                                           use_threads=False)
