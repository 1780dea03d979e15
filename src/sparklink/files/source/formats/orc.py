"""ORC (executor side): whole files read stripe by stripe with ``pyarrow.orc``."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pyarrow.orc as orc

from sparklink.files.source.config import FileSourceConfig
from sparklink.files.source.file_input import arrow_input
from sparklink.files.source.formats.base import FileFormat, SegmentInput


class OrcFormat(FileFormat):
    name = "orc"

    def infer_schema(self, path: str, config: FileSourceConfig) -> pa.Schema:
        with arrow_input(path, config.s3) as file:
            return orc.ORCFile(file).schema

    def read(self, source: SegmentInput) -> Iterator[pa.RecordBatch]:
        with arrow_input(source.path, source.config.s3) as file:
            handle = orc.ORCFile(file)
            present = set(handle.schema.names)
            columns = [name for name in source.data_schema.names if name in present]
            for stripe in range(handle.nstripes):
                batch = handle.read_stripe(stripe, columns=columns or None)
                if not columns:
                    batch = pa.record_batch([pa.nulls(batch.num_rows)], names=["__rows__"])
                yield batch
