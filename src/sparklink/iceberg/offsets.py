"""The ``sparklink.iceberg`` source's offset: where a stream stands in the table's history.

``{"v": 1, "snapshot": S, "position": p}`` in Spark's offset log (small JSON, as every offset):

* every snapshot before ``S`` in the ancestry of the table's current snapshot is read (or
  skipped), and so are the first ``p`` data files that ``S`` adds (in manifest order);
* ``p == -1``: ``S`` itself is not entered yet (a new query's first snapshot: the oldest ancestor,
  ``startingSnapshotId`` or the first snapshot at ``startingTimestamp``);
* ``S == -1``: nothing read and the table had no snapshot; the stream starts at the oldest
  ancestor of whatever snapshot comes.

Iceberg's Spark source keeps (snapshot id, position) too (its ``StreamingOffset``); the
``v`` field lets a later layout refuse or convert this one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sparklink.errors import DataError

OFFSET_VERSION = 1
NO_SNAPSHOT = -1
NOT_ENTERED = -1


@dataclass(frozen=True, kw_only=True)
class IcebergOffset:
    snapshot_id: int
    position: int

    @property
    def before_any_snapshot(self) -> bool:
        return self.snapshot_id == NO_SNAPSHOT

    def to_json(self) -> dict[str, Any]:
        return {"v": OFFSET_VERSION, "snapshot": self.snapshot_id, "position": self.position}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "IcebergOffset":
        if not isinstance(data, dict) or data.get("v") != OFFSET_VERSION:
            raise DataError(f"sparklink.iceberg offset {data!r} is not version {OFFSET_VERSION}; it was written by "
                            "another sparklink version: restart the query with a new checkpoint")
        try:
            return cls(snapshot_id=int(data["snapshot"]), position=int(data["position"]))
        except (KeyError, TypeError, ValueError):
            raise DataError(f"sparklink.iceberg offset {data!r} lacks an integer 'snapshot' or 'position'") from None


START = IcebergOffset(snapshot_id=NO_SNAPSHOT, position=NOT_ENTERED)
