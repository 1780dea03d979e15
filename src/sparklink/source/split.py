"""Splits: the unit of work a source hands to a reader (Flink's SourceSplit).

A split is created on the driver by a :class:`~sparklink.source.enumerator.SplitEnumerator`,
pickled into a Spark ``InputPartition`` and read by one executor task. Its state must be
JSON-serialisable so that it can be logged and checked.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from sparklink.errors import SplitError

SPLIT_FORMAT_VERSION = 1


@dataclass(frozen=True, kw_only=True)
class Split:
    """One portion of a source's data: a file region, a sequence range, a table range.

    ``split_id`` is unique within the source; ``state`` holds what the reader needs to read it
    (JSON values only).
    """

    split_id: str
    state: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.split_id, str) or not self.split_id:
            raise SplitError(f"split_id must be a non-empty string, got {self.split_id!r}")
        try:
            json.dumps(self.state)
        except (TypeError, ValueError) as exc:
            raise SplitError(f"state of split '{self.split_id}' is not JSON-serialisable: {exc}") from exc

    def to_json(self) -> str:
        return json.dumps({"v": SPLIT_FORMAT_VERSION, "id": self.split_id, "state": self.state}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "Split":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise SplitError(f"split is not valid JSON: {exc}") from exc
        return cls.from_data(data)

    @classmethod
    def from_data(cls, data: Any) -> "Split":
        """The split of :meth:`to_json`'s object, already parsed (a task's list of splits)."""
        if not isinstance(data, dict) or data.get("v") != SPLIT_FORMAT_VERSION:
            version = data.get("v") if isinstance(data, dict) else None
            raise SplitError(f"split format version {version!r} is not supported (expected {SPLIT_FORMAT_VERSION})")
        return cls(split_id=data["id"], state=data["state"])
