"""Text lines: one record per line, in a single string column ``value`` (executor side).

Writing (:class:`TextEncoder`): the string value and a newline per row (a null is an empty line).

Reading (:class:`TextLineFormat`): lines end with ``\\n`` (a trailing ``\\r`` is removed).
Bytes that are not UTF-8 are a malformed record: FAILFAST names the line, DROPMALFORMED drops
it, PERMISSIVE keeps it with the bad bytes replaced by U+FFFD.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import BinaryIO

import pyarrow as pa
import pyarrow.compute as pc

from sparklink.formats.bad_records import location
from sparklink.formats.base import FileFormat, RowEncoder, SegmentInput, joined_bytes
from sparklink.formats.compression import codec_for, read_line_range, read_whole
from sparklink.formats.options import BATCH_TARGET_BYTES, DEFAULT_BATCH_ROWS, MAX_AUTO_BATCH_ROWS
from sparklink.formats.read_config import ReadConfig
from sparklink.formats.records import lines_with_offsets

VALUE_COLUMN = "value"


class TextEncoder(RowEncoder):
    """One line per row: the string value and a newline (a null is an empty line)."""

    def encode(self, batch: pa.RecordBatch) -> bytes | memoryview:
        column = pc.fill_null(batch.column(0), "")
        return joined_bytes(pc.binary_join_element_wise(column, pa.scalar("", pa.string()), "\n"))


def read_lines(source: BinaryIO) -> list[str]:
    """The lines of a whole file (``sparklink verify``): UTF-8, split at line ends."""
    return source.read().decode("utf-8").splitlines()


def read_table(source: BinaryIO, name: str) -> pa.Table:
    """A whole text file as one ``value`` column (``sparklink verify``)."""
    return pa.table({VALUE_COLUMN: read_lines(source)})


def segment_bytes(source: SegmentInput) -> tuple[bytes, int]:
    """The segment's (decompressed) bytes and the file offset of its first byte."""
    segment = source.segment
    if segment.unit == "bytes":
        return read_line_range(segment.path, segment.start or 0, segment.end or segment.size, source.config.s3)
    return read_whole(segment.path, codec_for(segment.path, source.config.compression), source.config.s3), 0


class TextLineFormat(FileFormat):
    name = "text"

    def infer_schema(self, path: str, config: ReadConfig) -> pa.Schema:
        return pa.schema([pa.field(VALUE_COLUMN, pa.string())])

    def read(self, source: SegmentInput) -> Iterator[pa.RecordBatch]:
        body, base = segment_bytes(source)
        if not body:
            return
        lines = body.split(b"\n")
        if lines and lines[-1] == b"":
            lines.pop()
        raw = pa.array(lines, pa.binary())
        if b"\r" in body:
            raw = pc.replace_substring_regex(raw, pattern="\r$", replacement="")
        try:
            values = raw.cast(pa.string())
        except pa.ArrowInvalid:
            values = self._decode_rows(body, base, source)
        rows = source.config.batch_size or max(  # about BATCH_TARGET_BYTES per batch, by the segment's line length
            DEFAULT_BATCH_ROWS, min(MAX_AUTO_BATCH_ROWS, BATCH_TARGET_BYTES * len(values) // max(1, len(body))))
        for start in range(0, len(values), rows):
            chunk = values.slice(start, rows)
            yield pa.RecordBatch.from_arrays([chunk], names=[VALUE_COLUMN])

    @staticmethod
    def _decode_rows(body: bytes, base: int, source: SegmentInput) -> pa.Array:
        policy = source.bad_records()
        line_base = 0 if base == 0 else None
        decoded: list[str] = []
        for index, offset, line in lines_with_offsets(body):
            try:
                decoded.append(line.decode("utf-8"))
            except UnicodeDecodeError as exc:
                where = location(byte_offset=base + offset, line=None if line_base is None else index + 1)
                if policy.malformed(where=where, reason=f"not valid UTF-8 ({exc.reason} at column {exc.start + 1})"):
                    decoded.append(line.decode("utf-8", errors="replace"))
        return pa.array(decoded, pa.string())
