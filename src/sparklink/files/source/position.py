"""The file source's offset: one position in the reading order, O(1) in size.

Files are read in the order ``(arrival key, path)`` (see :mod:`~sparklink.files.source.listing`).
The offset Spark stores after a micro-batch is the position of the last file admitted::

    {"v": 1, "ts": 1716200000123456789, "path": "/data/in/day=3/f-0042.csv"}

meaning *every file ordered at or before this position has been read*. Nothing else is
remembered: the state neither grows with the number of files ever processed nor needs a side
log. This is correct because the enumerator only admits files whose arrival key is older than
the start of its listing minus a safety margin (and ``minFileAge``): a file that becomes
visible later gets a later arrival key, so it always sorts after every admitted position.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from sparklink.errors import SplitError

POSITION_VERSION = 1


@dataclass(frozen=True, kw_only=True, order=True)
class FilePosition:
    """A point in the reading order; ``ts = -1`` is before every file."""

    ts: int
    path: str = ""

    @property
    def sort_key(self) -> tuple[int, str]:
        return (self.ts, self.path)

    def to_offset(self) -> dict[str, Any]:
        return {"v": POSITION_VERSION, "ts": self.ts, "path": self.path}

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
        return cls(ts=ts, path=path)


START = FilePosition(ts=-1, path="")
