"""ORC (executor side), through ``pyarrow.orc``: written by :class:`OrcBulkWriter` (a stripe
per ``rowGroupSize`` bytes), read by :class:`OrcFormat` as whole files, stripe by stripe."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

import pyarrow as pa
import pyarrow.orc as orc

from sparklink.formats.base import FileFormat, NativeFileWriter, SegmentInput
from sparklink.formats.read_config import ReadConfig
from sparklink.storage.file_input import arrow_input


class OrcBulkWriter(NativeFileWriter):
    """ORC through pyarrow; its writer cuts a stripe once it holds ``stripe_bytes``."""

    def __init__(self, path: Path | BinaryIO, schema: pa.Schema, codec: str, *, stripe_bytes: int):
        super().__init__(path)
        self.stripe_bytes = stripe_bytes
        self.writer = orc.ORCWriter(self.sink, compression="uncompressed" if codec == "none" else codec,
                                    stripe_size=stripe_bytes)
        self.arrow_bytes = 0

    def write_batch(self, batch: pa.RecordBatch) -> None:
        self.writer.write(pa.Table.from_batches([batch]))
        self.arrow_bytes += batch.nbytes

    def buffered_bytes(self) -> int:
        return min(self.arrow_bytes, self.stripe_bytes)

    def size(self) -> int:
        return self.sink.tell() + self.buffered_bytes()

    def release(self) -> bool:
        return False  # pyarrow cannot cut a stripe on demand: the file is rolled instead

    def close(self) -> int:
        self.writer.close()
        return self._finish_sink()


def read_batches(source: Any) -> Iterator[pa.RecordBatch]:
    """Every record batch of a whole file (compaction); ``source`` is a random-access file."""
    yield from orc.ORCFile(source).read().to_batches()


def read_table(source: Any, name: str) -> pa.Table:
    """A whole file (``sparklink verify``)."""
    return orc.read_table(source)


class OrcFormat(FileFormat):
    name = "orc"
    reads_through_read_ahead = True

    def infer_schema(self, path: str, config: ReadConfig) -> pa.Schema:
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
