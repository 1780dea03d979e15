"""What every file format shares: the one suffix table and the interfaces
each format module implements (driver and executor side).

A format module (:mod:`~sparklink.formats.text`, ``csv_format``, ``json_lines``,
``parquet``, ``avro``, ``orc``) holds both directions of one format:

* writing (executor side, the file sink, compaction, the Delta and Iceberg data files): a
  :class:`RowEncoder` (Arrow record batch -> bytes appended to a part file; text, JSON lines,
  CSV) or a :class:`BulkWriter` (record batches streamed into one self-contained file; Parquet,
  Avro, ORC);
* reading: a :class:`FileFormat` (the file source: schema inference on the driver, one segment
  of a file into record batches on executors), plus the whole-file readers compaction and
  ``sparklink verify`` use.

:class:`~sparklink.formats.config.FormatConfig` (the writers' config) picks the writer;
:func:`sparklink.formats.get_format` the reader, which is given a
:class:`~sparklink.formats.read_config.ReadConfig` (the readers' config) and a
:class:`FileRange`: formats know no connector's config. The format names and every format
option are in :mod:`sparklink.formats.options`.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Protocol

import numpy as np
import pyarrow as pa

from sparklink.formats.bad_records import BadRecords
from sparklink.formats.read_config import ReadConfig

# the one suffix table: the suffix the sink gives each format's files, and the format a suffix names
EXTENSIONS = {"text": ".txt", "json": ".json", "csv": ".csv", "parquet": ".parquet", "avro": ".avro", "orc": ".orc"}
SUFFIX_ALIASES = {".jsonl": "json"}  # suffixes users give with partSuffix that still name a format
WRITE_BUFFER = 1024 * 1024  # bytes buffered in Arrow before they reach a Python file object (S3 upload)


def format_of_suffix(suffix: str) -> str | None:
    """The format a file suffix names (``.parquet`` -> parquet), None for a suffix of no format."""
    suffix = suffix.lower()
    by_suffix = {extension: name for name, extension in EXTENSIONS.items()}
    return by_suffix.get(suffix) or SUFFIX_ALIASES.get(suffix)


# ---------------------------------------------------------------------------------- writing


class RowEncoder(ABC):
    """Arrow record batch -> bytes to append to a row-format part file (executor side); a
    memoryview of Arrow's buffer where the text was built in one (no copy into a ``bytes``)."""

    def header(self) -> bytes:
        """Bytes that start every new file (CSV header line), empty otherwise."""
        return b""

    @abstractmethod
    def encode(self, batch: pa.RecordBatch) -> bytes | memoryview: ...


class BulkWriter(ABC):
    """Writes record batches into one self-contained file (executor side, one per open file).

    Writers buffer: :meth:`buffered_bytes` says how much memory the not-yet-written rows hold,
    :meth:`release` writes them out early when the task's buffer budget is exceeded.
    """

    @abstractmethod
    def write_batch(self, batch: pa.RecordBatch) -> None: ...

    @abstractmethod
    def size(self) -> int:
        """Bytes the file will have so far: written plus an estimate for buffered rows."""

    @abstractmethod
    def buffered_bytes(self) -> int:
        """Memory held for rows not yet written to the file (an upper bound)."""

    @abstractmethod
    def release(self) -> bool:
        """Write the buffered rows out now (a smaller row group or block); False when the
        format cannot, and the file has to be closed to free them (ORC)."""

    @abstractmethod
    def close(self) -> int:
        """Finish the file, fsync it and return its length."""


class NativeFileWriter(BulkWriter):
    """A bulk writer whose bytes go through an Arrow output stream: a new local file at a
    ``Path``, or a binary file object (an S3 multipart upload: closing the writer closes it)."""

    def __init__(self, path: Path | BinaryIO):
        self.sink: pa.NativeFile
        if isinstance(path, Path):
            self.path: Path | None = path
            self.output: BinaryIO | None = None
            self.sink = pa.OSFile(str(path), "wb")
        else:
            self.path, self.output = None, path
            # buffered: pyarrow's many small writes reach the Python file object in 1 MiB pieces
            self.sink = pa.BufferedOutputStream(pa.PythonFile(path, mode="w"), buffer_size=WRITE_BUFFER)

    def _finish_sink(self) -> int:
        self.sink.close()
        if self.output is not None:
            self.output.close()  # the object's last bytes go out (an S3 upload's last part)
            return self.output.tell()
        assert self.path is not None  # a local file: synced here, as pyarrow's OSFile does not
        with open(self.path, "rb+") as handle:
            os.fsync(handle.fileno())
        return self.path.stat().st_size


def joined_bytes(lines: pa.Array | pa.ChunkedArray) -> memoryview:
    """The bytes of a string array's values, back to back: a view of its data buffer, sliced
    (copying them into a ``bytes`` cost as much as a third of the JSON encoding)."""
    if isinstance(lines, pa.ChunkedArray):
        lines = lines.combine_chunks()
    if len(lines) == 0:
        return memoryview(b"")
    offsets = np.frombuffer(lines.buffers()[1], dtype=np.int32)
    first, last = int(offsets[lines.offset]), int(offsets[lines.offset + len(lines)])
    return memoryview(lines.buffers()[2].slice(first, last - first))


# ---------------------------------------------------------------------------------- reading


class FileRange(Protocol):
    """The part of one file a format reads (the file source's
    :class:`~sparklink.files.source.splits.Segment` is one). ``start``/``end`` are bytes when
    ``unit`` is ``bytes``, row-group or stripe indexes for ``row_groups`` / ``stripes``, and
    ``None`` for the whole file (``unit`` ``file``)."""

    @property
    def path(self) -> str: ...

    @property
    def size(self) -> int: ...

    @property
    def start(self) -> int | None: ...

    @property
    def end(self) -> int | None: ...

    @property
    def unit(self) -> str: ...


@dataclass(frozen=True, kw_only=True)
class SegmentInput:
    """What a format needs to read one segment."""

    segment: FileRange
    data_schema: pa.Schema          # the columns wanted from the file's content (no partition columns)
    corrupt_column: str | None      # PERMISSIVE: the column that receives malformed records' text
    config: ReadConfig
    schema_file: str | None

    @property
    def path(self) -> str:
        return self.segment.path

    def bad_records(self) -> BadRecords:
        return BadRecords(mode=self.config.mode, path=self.path, corrupt_column=self.corrupt_column)


class FileFormat(ABC):
    """One file format as the file source reads it (Flink's StreamFormat / BulkFormat).

    ``read`` is called once per segment of a file; it yields record batches that hold (at
    least) the requested data columns by name.
    """

    name: str = ""
    #: whether a large object of this format on an object store is decoded as it is read through
    #: a read-ahead file (:class:`sparklink.files.source.prefetch.ReadAhead`: ORC, Avro). False:
    #: the format fetches a segment itself (text formats: one ranged GET of the segment; Parquet:
    #: pyarrow's pre-buffering, a row group at a time)
    reads_through_read_ahead: bool = False

    @abstractmethod
    def infer_schema(self, path: str, config: ReadConfig) -> pa.Schema:
        """The data schema of ``path`` (driver side, at query start; bulk formats read metadata only)."""

    @abstractmethod
    def read(self, source: SegmentInput) -> Iterator[pa.RecordBatch]:
        """The records of one segment (executor side)."""
