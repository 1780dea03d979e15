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

Compactors: :func:`concat_compact` for row formats (bytes concatenated, the CSV header kept
once) and :func:`record_wise_compact` for bulk formats (records re-written with the same
schema and codec).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from sparklink.errors import ConfigError, naming_path
from sparklink.faults import fault_point
from sparklink.files.sink.formats import FormatConfig, read_bulk_batches
from sparklink.files.sink.part_files import PartFile, fsync_dir

OPTION_SIZE_THRESHOLD = "compaction.sizeThreshold"
OPTION_EVERY_N_CHECKPOINTS = "compaction.everyNCheckpoints"


@dataclass(frozen=True, kw_only=True)
class FileCompactStrategy:
    """When to compact: ``size_threshold`` bytes held in a bucket, or ``every_n_checkpoints``
    micro-batches waited; at least one must be set."""

    size_threshold: int | None = None
    every_n_checkpoints: int | None = None

    def __post_init__(self) -> None:
        if self.size_threshold is None and self.every_n_checkpoints is None:
            raise ConfigError(OPTION_SIZE_THRESHOLD, "compaction needs a size threshold, a number of checkpoints or both",
                              f"{OPTION_SIZE_THRESHOLD}=64MB and/or {OPTION_EVERY_N_CHECKPOINTS}=5")
        if self.size_threshold is not None and self.size_threshold < 1:
            raise ConfigError(OPTION_SIZE_THRESHOLD, f"must be at least 1 byte, got {self.size_threshold}")
        if self.every_n_checkpoints is not None and self.every_n_checkpoints < 1:
            raise ConfigError(OPTION_EVERY_N_CHECKPOINTS, f"must be at least 1, got {self.every_n_checkpoints}")

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
            options[OPTION_SIZE_THRESHOLD] = str(self.size_threshold)
        if self.every_n_checkpoints is not None:
            options[OPTION_EVERY_N_CHECKPOINTS] = str(self.every_n_checkpoints)
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


def concat_compact(inputs: list[tuple[Path, int]], output: Path, *, header: bytes = b"") -> None:
    """Row formats: concatenate the first ``length`` bytes of each input; a file header
    (CSV) present at the start of every input is written once."""
    with open(output, "wb") as out:
        for index, (path, length) in enumerate(inputs):
            with open(path, "rb") as source:
                skip = 0
                if header and index > 0 and source.read(len(header)) == header:
                    skip = len(header)
                source.seek(skip)
                remaining = length - skip
                while remaining > 0:
                    chunk = source.read(min(remaining, 8 * 1024 * 1024))
                    if not chunk:
                        break
                    out.write(chunk)
                    remaining -= len(chunk)
        out.flush()
        os.fsync(out.fileno())


def record_wise_compact(config: FormatConfig, inputs: list[Path], output: Path) -> None:
    """Bulk formats: read every record of the inputs and write one file with the same schema
    and codec (Parquet/ORC batch by batch through Arrow, Avro record by record)."""
    if config.name == "avro":
        import fastavro
        from fastavro.write import Writer

        with open(inputs[0], "rb") as first:
            schema = fastavro.reader(first).writer_schema
        with open(output, "wb") as handle:
            writer = Writer(handle, schema, codec=config.codec)
            for path in inputs:
                for record in read_bulk_batches(config, path):
                    writer.write(record)
            writer.flush()
            handle.flush()
            os.fsync(handle.fileno())
        return
    writer = None
    for path in inputs:
        for batch in read_bulk_batches(config, path):
            assert isinstance(batch, pa.RecordBatch)
            if writer is None:
                writer = config.bulk_writer(output, batch.schema)
            writer.write_batch(batch)
    if writer is None:  # every input was empty: copy the first, which is a valid empty file
        shutil.copyfile(inputs[0], output)
    else:
        writer.close()


def run_compaction(config: FormatConfig, root: Path, inputs: list[PartFile], tmp: str, final: str, *,
                   header: bytes, batch_id: int | None) -> None:
    """Run one planned compaction to the end (driver side, inside the commit); idempotent."""
    final_path, tmp_path = root / final, root / tmp
    if not final_path.exists():
        fault_point("compaction.before_write", batch_id=batch_id)
        with naming_path(tmp_path):  # a full disk names the compacted file being written
            if config.bulk:
                record_wise_compact(config, [root / f.path for f in inputs], tmp_path)
            else:
                concat_compact([(root / f.path, f.length) for f in inputs], tmp_path, header=header)
        fault_point("compaction.after_write", batch_id=batch_id)
        os.replace(tmp_path, final_path)
        fsync_dir(final_path.parent)
    fault_point("compaction.after_rename", batch_id=batch_id)
    for part in inputs:
        (root / part.path).unlink(missing_ok=True)
    tmp_path.unlink(missing_ok=True)
    fault_point("compaction.after_remove", batch_id=batch_id)
