"""Split state: which parts of which files one Spark task reads, and how a batch is cut.

Planned on the driver (deterministically, from the batch's files), read on executors. A split
holds one or more *segments*; a segment is a whole file, a line-aligned byte range of a
splittable text file, or a range of Parquet row groups / ORC stripes. Small files are packed
into one split so that many small files do not mean many tasks.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from sparklink.errors import DataError
from sparklink.files.source.config import FileSourceConfig
from sparklink.files.source.listing import FileStatus
from sparklink.files.source.partitions import Partition
from sparklink.formats.compression import codec_for
from sparklink.source import Split
from sparklink.source.packing import OPEN_COST_BYTES, target_bytes
from sparklink.storage.file_input import arrow_input
from sparklink.storage.s3_config import S3Config


@dataclass(frozen=True, kw_only=True)
class Segment:
    """Part of one file. ``start``/``end`` are bytes for text formats, row-group or stripe
    indexes for Parquet/ORC (``unit``), and ``None`` for the whole file."""

    path: str
    size: int
    partition: Partition = ()
    start: int | None = None
    end: int | None = None
    unit: str = "file"  # file | bytes | row_groups | stripes

    def to_state(self) -> dict:
        return {"path": self.path, "size": self.size, "partition": [list(p) for p in self.partition],
                "start": self.start, "end": self.end, "unit": self.unit}

    @classmethod
    def from_state(cls, state: dict) -> "Segment":
        # a "span" (the bytes of a range of row groups), kept by splits of earlier versions, is not read
        return cls(path=state["path"], size=state["size"], partition=tuple(tuple(p) for p in state["partition"]),
                   start=state["start"], end=state["end"], unit=state["unit"])

    @property
    def cost(self) -> int:
        if self.unit == "bytes" and self.start is not None and self.end is not None:
            return self.end - self.start + OPEN_COST_BYTES
        if self.unit in ("row_groups", "stripes") and self.start is not None and self.end is not None:
            return self.size + OPEN_COST_BYTES  # size is the range's compressed bytes
        return self.size + OPEN_COST_BYTES


def split_size(files: Sequence[FileStatus], config: FileSourceConfig, default_partitions: int) -> int:
    """Target bytes per split (as Spark's ``maxSplitBytes``): enough splits to use every core."""
    total = sum(f.size + OPEN_COST_BYTES for f in files)
    return target_bytes(total, config.min_partitions or default_partitions, config.max_split_bytes)


def _byte_ranges(file: FileStatus, target: int) -> list[Segment]:
    count = max(1, math.ceil(file.size / target))
    step = math.ceil(file.size / count)
    return [Segment(path=file.path, size=file.size, partition=file.partition, start=begin,
                    end=min(file.size, begin + step), unit="bytes")
            for begin in range(0, file.size, step)]


def _parquet_ranges(file: FileStatus, target: int, s3: S3Config | None) -> list[Segment]:
    """Contiguous row-group ranges of about ``target`` on-disk bytes each, as Spark cuts Parquet:
    the file is cut into ``ceil(size / target)`` equal byte ranges and a row group belongs to the
    range holding its midpoint (compressed bytes, the unit of ``target``). Every row group is in
    exactly one range; a file with fewer row groups than ranges gives fewer segments."""
    from sparklink.formats import parquet

    try:
        with arrow_input(file.path, s3) as source:
            metadata = parquet.read_metadata(source)
    except FileNotFoundError:
        return [Segment(path=file.path, size=file.size, partition=file.partition)]  # the reader reports it
    except Exception as exc:  # pyarrow raises ArrowInvalid / OSError for a damaged footer
        raise DataError(f"{file.path}: cannot read the Parquet footer: {exc}") from exc
    groups = metadata.num_row_groups
    if groups <= 1:
        return [Segment(path=file.path, size=file.size, partition=file.partition)]
    sizes = [sum(metadata.row_group(g).column(c).total_compressed_size for c in range(metadata.num_columns))
             for g in range(groups)]
    total = sum(sizes)
    pieces = max(1, min(groups, math.ceil(file.size / target)))
    owner: list[int] = []
    offset = 0
    for size in sizes:
        owner.append(min(pieces - 1, (2 * offset + size) * pieces // max(1, 2 * total)))
        offset += size
    segments: list[Segment] = []
    begin = 0
    for index in range(1, groups + 1):
        if index == groups or owner[index] != owner[begin]:
            segments.append(Segment(path=file.path, size=sum(sizes[begin:index]), partition=file.partition,
                                    start=begin, end=index, unit="row_groups"))
            begin = index
    return segments


def segments_for(file: FileStatus, config: FileSourceConfig, target: int) -> list[Segment]:
    """Cut one file into segments of about ``target`` bytes where its format allows."""
    if file.size <= target:
        return [Segment(path=file.path, size=file.size, partition=file.partition)]
    if config.format == "parquet":
        return _parquet_ranges(file, target, config.s3)
    if config.splittable_text and codec_for(file.path, config.compression) is None:
        return _byte_ranges(file, target)
    return [Segment(path=file.path, size=file.size, partition=file.partition)]


def plan(files: Sequence[FileStatus], config: FileSourceConfig, *, default_partitions: int,
         split_prefix: str, schema_file: str | None) -> list[Split]:
    """The splits that read exactly ``files``: large files cut, small ones packed together."""
    if not files:
        return []
    target = split_size(files, config, default_partitions)
    splits: list[Split] = []
    current: list[Segment] = []
    current_cost = 0

    def close() -> None:
        nonlocal current, current_cost
        if current:
            state = {"segments": [s.to_state() for s in current], "schema_file": schema_file}
            splits.append(Split(split_id=f"{split_prefix}-{len(splits)}", state=state))
        current, current_cost = [], 0

    for file in files:
        for segment in segments_for(file, config, target):
            if current and current_cost + segment.cost > target:
                close()
            current.append(segment)
            current_cost += segment.cost
    close()
    return splits
