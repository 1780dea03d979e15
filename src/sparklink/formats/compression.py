"""Reading the bytes of text files: compression by extension, and line-aligned byte ranges.

Executor side, once per segment. Gzip and zstd files are decompressed whole (they cannot be
split); uncompressed files can be read as a byte range that starts and ends on line
boundaries, so that each line belongs to exactly one range (the one holding its first byte).
A path may be an S3 object URI (``s3``: the source's S3 settings); its bytes then come by
ranged GETs (:mod:`~sparklink.storage.file_input`).
"""

from __future__ import annotations

import pyarrow as pa

from sparklink.storage.file_input import arrow_input, open_binary
from sparklink.storage.s3_config import S3Config

CODEC_BY_SUFFIX = {".gz": "gzip", ".gzip": "gzip", ".zst": "zstd", ".zstd": "zstd"}
_SCAN_CHUNK = 64 * 1024


def codec_for(path: str, compression: str) -> str | None:
    """The codec to decompress ``path`` with: from the option, or (``auto``) the file suffix."""
    if compression == "none":
        return None
    if compression != "auto":
        return compression
    lowered = path.lower()
    for suffix, codec in CODEC_BY_SUFFIX.items():
        if lowered.endswith(suffix):
            return codec
    return None


def read_whole(path: str, codec: str | None, s3: S3Config | None = None) -> bytes:
    """All (decompressed) bytes of a file. Truncated archives raise OSError / ArrowInvalid."""
    if codec is None:
        with open_binary(path, s3) as handle:
            return handle.read()
    with arrow_input(path, s3) as source:
        raw = pa.OSFile(source, "rb") if isinstance(source, str) else source
        with pa.CompressedInputStream(raw, codec) as stream:
            return stream.read()


def _next_line_start(handle, position: int) -> int:
    """The first line start at or after ``position`` (a line starts after a newline)."""
    if position == 0:
        return 0
    handle.seek(position - 1)
    offset = position - 1
    while True:
        chunk = handle.read(_SCAN_CHUNK)
        if not chunk:
            return offset
        found = chunk.find(b"\n")
        if found >= 0:
            return offset + found + 1
        offset += len(chunk)


def read_line_range(path: str, start: int, end: int, s3: S3Config | None = None) -> tuple[bytes, int]:
    """The lines whose first byte lies in ``[start, end)``, and the byte offset of the first one."""
    with open_binary(path, s3) as handle:
        begin = _next_line_start(handle, start)
        if begin >= end:
            return b"", begin
        handle.seek(begin)
        data = handle.read(end - begin)
        if data.endswith(b"\n") or len(data) < end - begin:
            return data, begin
        tail = [data]
        while True:
            chunk = handle.read(_SCAN_CHUNK)
            if not chunk:
                break
            found = chunk.find(b"\n")
            if found >= 0:
                tail.append(chunk[: found + 1])
                break
            tail.append(chunk)
        return b"".join(tail), begin
