"""The file source's offset: one position in the reading order, O(1) in size.

Files are read in the order ``(arrival key, path)`` (see :mod:`~sparklink.files.source.listing`).
The offset Spark stores after a micro-batch is the position of the last file admitted::

    {"v": 1, "ts": 1716200000123456789, "path": "/data/in/day=3/f-0042.csv"}

meaning *every file ordered at or before this position has been read*. Nothing else is
remembered: the state neither grows with the number of files ever processed nor needs a side
log. This is correct because the enumerator only admits files whose arrival key is older than
the start of its listing minus a safety margin (and ``minFileAge``): a file that becomes
visible later gets a later arrival key, so it always sorts after every admitted position.

On S3 an object's arrival key is its ``LastModified``, which is *not* when it became visible
(a multipart upload's object carries the time the upload was initiated). There the position
is a *watermark* plus the files admitted above it, ``recent`` (``[arrival key, path]`` pairs)::

    {"v": 1, "ts": 1716200000000000000, "path": "", "recent": [[1716200412000000000, "s3://b/in/x.csv"]]}

meaning *every file ordered at or before (ts, path), and every file in recent, has been read*.
The watermark trails the listing time by ``maxVisibilityDelay``, so ``recent`` holds only the
files admitted within that window: bounded, as Spark's ``seenFiles`` is by ``maxFileAge``
(see :mod:`~sparklink.files.source.enumerator` and docs/file-source.md).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from sparklink.errors import SplitError

POSITION_VERSION = 1


@dataclass(frozen=True, kw_only=True, order=True)
class FilePosition:
    """A point in the reading order; ``ts = -1`` is before every file. ``recent`` (S3 only): the
    ``(arrival key, path)`` of files read that sort after the point, in reading order."""

    ts: int
    path: str = ""
    recent: tuple[tuple[int, str], ...] = ()

    @property
    def sort_key(self) -> tuple[int, str]:
        return (self.ts, self.path)

    @cached_property
    def _recent_paths(self) -> frozenset[str]:
        return frozenset(path for _, path in self.recent)

    def covers(self, sort_key: tuple[int, str]) -> bool:
        """Whether the file at ``sort_key`` (``(arrival key, path)``) has been read at this position."""
        return sort_key <= self.sort_key or (bool(self.recent) and sort_key[1] in self._recent_paths)

    def to_offset(self) -> dict[str, Any]:
        offset: dict[str, Any] = {"v": POSITION_VERSION, "ts": self.ts, "path": self.path}
        if self.recent:
            offset["recent"] = [[ts, path] for ts, path in self.recent]
        return offset

    @classmethod
    def from_offset(cls, offset: Any) -> "FilePosition":
        if isinstance(offset, str):
            try:
                offset = json.loads(offset)
            except json.JSONDecodeError as exc:
                raise SplitError(f"file source offset is not JSON: {exc}") from None
        if not isinstance(offset, dict) or offset.get("v") != POSITION_VERSION:
            raise SplitError(f"file source offset {offset!r} is not a version-{POSITION_VERSION} position; "
                             "was the checkpoint written by another source?")
        ts, path = offset.get("ts"), offset.get("path")
        if not isinstance(ts, int) or not isinstance(path, str):
            raise SplitError(f"file source offset {offset!r} lacks an integer 'ts' and a string 'path'")
        recent = offset.get("recent", [])
        pairs = all(isinstance(r, list) and len(r) == 2 and isinstance(r[0], int) and isinstance(r[1], str)
                    for r in recent) if isinstance(recent, list) else False
        if not pairs:
            raise SplitError(f"file source offset {offset!r}: 'recent' is not a list of [arrival key, path] pairs")
        return cls(ts=ts, path=path, recent=tuple((r[0], r[1]) for r in recent))


START = FilePosition(ts=-1, path="")
