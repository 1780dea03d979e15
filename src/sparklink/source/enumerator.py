"""The split enumerator (Flink's SplitEnumerator), run on the driver.

In Flink the enumerator discovers splits, assigns them to readers and checkpoints its state.
On Spark the checkpoint is the offset Spark stores in its offset log for every micro-batch,
so an enumerator here is a function of offsets:

* :meth:`initial_offset` is where a new query starts;
* :meth:`latest_offset` discovers what is available after ``start`` within a read limit;
* :meth:`plan_splits` turns the range ``(start, end]`` into splits for the readers;
* :meth:`group_splits` says which of them one Spark task reads (one each by default).

Offsets are small JSON dicts (Spark keeps one per micro-batch). An enumerator may not keep
state that is needed for correctness only in memory: after a driver crash Spark asks again
with the offsets it logged, in a new process.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

from sparklink.source.split import Split

Offset = dict[str, Any]


@dataclass(frozen=True, kw_only=True)
class ReadLimit:
    """How much one micro-batch may admit (Spark's admission control).

    All fields ``None`` means everything available. Enumerators honour the limits they
    support and ignore the rest; at least one unit of progress is always allowed, so a
    single file larger than ``max_bytes`` still gets read.
    """

    max_rows: int | None = None
    max_files: int | None = None
    max_bytes: int | None = None
    until: dict[str, Any] | None = None  # Trigger.AvailableNow: admit nothing past this offset

    @property
    def unlimited(self) -> bool:
        return self.max_rows is None and self.max_files is None and self.max_bytes is None and self.until is None


READ_ALL = ReadLimit()


class SplitEnumerator(ABC):
    """Discovers splits on the driver. Created once per query run (and per bounded read)."""

    @abstractmethod
    def initial_offset(self) -> Offset:
        """The offset before any data; a new query starts reading after it."""

    @abstractmethod
    def latest_offset(self, start: Offset, limit: ReadLimit) -> Offset:
        """The furthest offset after ``start`` that ``limit`` admits; ``start`` if nothing new.

        Must honour ``limit.until`` (set under ``Trigger.AvailableNow``): never go past it.

        Runs on the driver before each micro-batch; it may list directories or query a
        database, but must not read the data itself.
        """

    @abstractmethod
    def plan_splits(self, start: Offset, end: Offset) -> list[Split]:
        """The splits holding exactly the data in ``(start, end]``. Deterministic: Spark calls
        it again with the same offsets when it replays a batch after a crash."""

    def group_splits(self, splits: list[Split]) -> list[list[Split]]:
        """Which of a batch's planned splits one Spark task reads, in order: one split per task
        unless the enumerator packs small ones together (:mod:`sparklink.source.packing`), as a
        source with a split per small data file does. Deterministic, as :meth:`plan_splits`."""
        return [[split] for split in splits]

    def available_now_offset(self, start: Offset | None) -> Offset | None:
        """The end offset for ``Trigger.AvailableNow``: everything available at this moment.

        ``start`` is None when Spark has not yet told the enumerator where the query stands.
        The default fixes the target at the first ``latest_offset`` call after that.
        """
        if start is None:
            return None
        return self.latest_offset(start, READ_ALL)

    def supported_limits(self) -> frozenset[str]:
        """Which :class:`ReadLimit` fields this enumerator honours (``max_rows`` ...)."""
        return frozenset()

    def report_latest_offset(self) -> Offset | None:
        """The newest offset the source has (for the lag in Spark's query progress), None if unknown.
        Reporting only: nothing is planned from it."""
        return None

    def commit(self, end: Offset) -> None:
        """Called on the driver when every batch up to ``end`` is durably processed.
        A place to forget state; never needed for correctness."""

    def close(self) -> None:
        """Release handles (connections, listings) at the end of the query."""
