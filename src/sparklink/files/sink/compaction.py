"""Compaction of pending files before they are committed (Flink's FileCompactStrategy and
FileCompactor), so readers never see both the small files and the compacted one.

Pending files are held per bucket in the sink's committed state. At a commit, a bucket's held
files are compacted when their total size reaches ``compaction.sizeThreshold`` or when they
have waited ``compaction.everyNCheckpoints`` micro-batches, whichever comes first. The plan is
part of the committed state (``state/<batchId>.json``) before anything is written; the
committer then, on the driver:

1. writes the compacted file to a hidden temporary name (``compaction.before_write`` /
   ``compaction.after_write`` fault points), unless its finished name already exists;
2. renames it to its finished name (``compaction.after_rename``);
3. deletes the inputs (``compaction.after_remove``).

Every step is idempotent, so a crash at any point is rolled forward. The inputs are hidden
files, so a reader sees either nothing of them or the one compacted file.

The files are read and written through the output's part-file seam
(:mod:`sparklink.storage.recoverable`): on S3 the held inputs are uploads completed at their
hidden names by the commit that holds them, and the compacted file is a multipart upload at its
finished name, invisible until completed (its temporary name is then only its identity).

Compactors: :func:`concat_compact` for row formats (bytes concatenated, the CSV header kept
once) and :func:`record_wise_compact` for bulk formats (records re-written with the same
schema and codec).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import pyarrow as pa

from sparklink.errors import CommitError, ConfigError, naming_path
from sparklink.faults import fault_point
from sparklink.files.sink.options import FileSinkOptions as O
from sparklink.files.sink.part_files import PENDING, PartFile
from sparklink.formats import avro
from sparklink.formats.config import FormatConfig, read_bulk_batches
from sparklink.storage.recoverable import COPY_CHUNK, PartStream, RecoverableWriter

SIZE_THRESHOLD, EVERY_N_CHECKPOINTS = O.compaction_size_threshold.key, O.compaction_every_n_checkpoints.key


@dataclass(frozen=True, kw_only=True)
class FileCompactStrategy:
    """When to compact: ``size_threshold`` bytes held in a bucket, or ``every_n_checkpoints``
    micro-batches waited; at least one must be set."""

    size_threshold: int | None = None
    every_n_checkpoints: int | None = None

    def __post_init__(self) -> None:
        if self.size_threshold is None and self.every_n_checkpoints is None:
            raise ConfigError(SIZE_THRESHOLD, "compaction needs a size threshold, a number of checkpoints or both",
                              f"{SIZE_THRESHOLD}=64MB and/or {EVERY_N_CHECKPOINTS}=5")
        if self.size_threshold is not None and self.size_threshold < 1:
            raise ConfigError(SIZE_THRESHOLD, f"must be at least 1 byte, got {self.size_threshold}")
        if self.every_n_checkpoints is not None and self.every_n_checkpoints < 1:
            raise ConfigError(EVERY_N_CHECKPOINTS, f"must be at least 1, got {self.every_n_checkpoints}")

    @staticmethod
    def builder() -> "FileCompactStrategy":
        """PyFlink spelling: ``FileCompactStrategy.builder().set_size_threshold(n).enable_compaction_on_checkpoint(5).build()``."""
        return _StrategyBuilder()  # type: ignore[return-value]

    def should_compact(self, *, total_size: int, waited: int) -> bool:
        if self.size_threshold is not None and total_size >= self.size_threshold:
            return True
        return self.every_n_checkpoints is not None and waited >= self.every_n_checkpoints

    def to_options(self) -> dict[str, str]:
        options = {}
        if self.size_threshold is not None:
            options[SIZE_THRESHOLD] = str(self.size_threshold)
        if self.every_n_checkpoints is not None:
            options[EVERY_N_CHECKPOINTS] = str(self.every_n_checkpoints)
        return options


@dataclass(frozen=True, kw_only=True)
class _StrategyBuilder:
    size_threshold: int | None = None
    every_n_checkpoints: int | None = None

    def set_size_threshold(self, size: int) -> "_StrategyBuilder":
        return dataclasses.replace(self, size_threshold=size)

    def enable_compaction_on_checkpoint(self, every_n: int) -> "_StrategyBuilder":
        return dataclasses.replace(self, every_n_checkpoints=every_n)

    def build(self) -> FileCompactStrategy:
        return FileCompactStrategy(size_threshold=self.size_threshold, every_n_checkpoints=self.every_n_checkpoints)


def concat_into(output: PartStream, inputs: list[tuple[str, Callable[[], Any], int]], *, header: bytes) -> None:
    """Row formats: append the first ``length`` bytes of each input (``(name, open, length)``,
    opened one at a time) to ``output``; a file header (CSV) present at the start of every
    input is written once. An input shorter than its recorded length is an error naming it."""
    for index, (name, open_input, length) in enumerate(inputs):
        with open_input() as source:
            remaining = length
            if header and index > 0:
                head = source.read(min(len(header), remaining))
                remaining -= len(head)
                if head != header:
                    output.write(head)
            if output.write_from(source, remaining) < remaining:
                raise CommitError(f"compaction input {name} is shorter than the {length} bytes its commit "
                                  "recorded")


def record_wise_compact(config: FormatConfig, inputs: list[tuple[str, Callable[[], Any]]],
                        output: Path | BinaryIO) -> None:
    """Bulk formats: read every record of the inputs (``(name, open)``: opened one at a time, as
    random-access files) and write one file with the same schema and codec (Parquet/ORC batch by
    batch through Arrow, Avro record by record). ``output`` is a new local file (synced to disk)
    or a file object (an S3 multipart upload), closed here in both cases."""
    if config.name == "avro":
        _avro_compact(config, inputs, output)
        return
    writer = None
    for name, open_input in inputs:
        with open_input() as source:
            for batch in read_bulk_batches(config, source, name=name):
                assert isinstance(batch, pa.RecordBatch)
                if writer is None:
                    writer = config.bulk_writer(output, batch.schema)
                writer.write_batch(batch)
    if writer is not None:
        writer.close()  # closes (local: syncs) the output
        return
    name, open_first = inputs[0]  # every input was empty: the first is a valid empty file
    with open_first() as first, _closed_output(output) as handle:
        shutil.copyfileobj(first, handle, COPY_CHUNK)


def _avro_compact(config: FormatConfig, inputs: list[tuple[str, Callable[[], Any]]], output: Path | BinaryIO) -> None:
    """:func:`record_wise_compact` for Avro: the records pass through fastavro, under the first
    input's writer schema."""
    with inputs[0][1]() as first:
        schema = avro.writer_schema(first)
    with _closed_output(output) as handle:
        avro.write_records(handle, schema, config.codec, _records(config, inputs))


def _records(config: FormatConfig, inputs: list[tuple[str, Callable[[], Any]]]) -> Iterator[Any]:
    """The records of every input, opened one at a time."""
    for name, open_input in inputs:
        with open_input() as source:
            yield from read_bulk_batches(config, source, name=name)


@contextlib.contextmanager
def _closed_output(output: Path | BinaryIO) -> Iterator[BinaryIO]:
    """``output`` as a writable file object that is closed at the end of the block: a new local
    file is synced to disk first; a file object (an S3 upload) sends its last part."""
    if isinstance(output, Path):
        with open(output, "wb") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        return
    yield output
    output.close()


def run_compaction(config: FormatConfig, part_files: RecoverableWriter, inputs: list[PartFile], tmp: str, final: str,
                   *, header: bytes, batch_id: int | None) -> None:
    """Run one planned compaction to the end (driver side, inside the commit); idempotent."""
    storage = part_files.storage
    if storage.info(final) is None:
        fault_point("compaction.before_write", batch_id=batch_id)
        for part in inputs:
            part_files.commit_hidden(part)  # readable at its hidden name (a replay recognises it)
        output = PartFile(bucket="", partition=-1, path=tmp, final=final, state=PENDING, length=0, rows=0,
                          created_at=0.0, last_write_at=0.0)
        stream = part_files.open(output, direct=True)
        with naming_path(storage.uri(tmp)):  # a full disk names the compacted file being written
            try:
                sources: list[tuple[str, Callable[[], Any], int]] = [
                    (storage.uri(part.path), functools.partial(storage.open_input, part.path), part.length)
                    for part in inputs]
                if config.bulk:
                    record_wise_compact(config, [source[:2] for source in sources], stream.bulk_target())
                else:
                    concat_into(stream, sources, header=header)
                stream.close()
            except BaseException:
                stream.discard()
                part_files.abort(output)
                raise
        fault_point("compaction.after_write", batch_id=batch_id)
        part_files.commit(output)
        part_files.clean_after_commit([output], [])
    fault_point("compaction.after_rename", batch_id=batch_id)
    for part in inputs:
        storage.delete(part.path)
    fault_point("compaction.after_remove", batch_id=batch_id)
