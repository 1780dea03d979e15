"""ORC (executor side): whole files read stripe by stripe with ``pyarrow.orc``."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pyarrow.orc as orc

from sparklink.files.source.config import FileSourceConfig
from sparklink.files.source.formats.base import FileFormat, SegmentInput


class OrcFormat(FileFormat):
    name = "orc"

    def infer_schema(self, path: str, config: FileSourceConfig) -> pa.Schema:
        return orc.ORCFile(path).schema

    def read(self, source: SegmentInput) -> Iterator[pa.RecordBatch]:
        handle = orc.ORCFile(source.path)
        present = set(handle.schema.names)
        columns = [name for name in source.data_schema.names if name in present]
        for stripe in range(handle.nstripes):
            batch = handle.read_stripe(stripe, columns=columns or None)
            if not columns:
                batch = pa.record_batch([pa.nulls(batch.num_rows)], names=["__rows__"])
            yield batch
