"""Times of one ``availableNow`` streaming query (benchmark side): the whole query, from
``start()`` to the end of ``awaitTermination()``, and its micro-batches alone.

A streaming Python source is planned in a Python process PySpark starts for each query, so a
one-query benchmark charges the source's once-per-query costs (that process, the source's imports,
opening the table) to every row. A running stream pays them once; after that each micro-batch
costs what its ``durationMs.triggerExecution`` says. The benchmarks print both, for sparklink,
its floor and Spark's own connector (``peer_job``'s ``stream`` step reports ``batch_seconds``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from sparklink.testing.peer_job import batch_seconds


@dataclass(frozen=True)
class QueryTimes:
    seconds: float  # start() to the end of awaitTermination()
    batches: float  # the micro-batches' triggerExecution, summed: the query's start left out
    rows: int


def run_available_now(writer) -> QueryTimes:
    """Start ``writer`` (a ``DataStreamWriter``) with ``trigger(availableNow=True)`` and time it."""
    start = time.perf_counter()
    query = writer.trigger(availableNow=True).start()
    query.awaitTermination()
    seconds = time.perf_counter() - start
    progress = query.recentProgress
    return QueryTimes(seconds, batch_seconds(progress), sum(record["numInputRows"] for record in progress))


class Best:
    """The best (least) whole-query and micro-batch seconds per case, over the repeats."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.batches: dict[str, float] = {}

    def add(self, name: str, seconds: float, batches: float | None = None) -> None:
        self.seconds[name] = min(self.seconds.get(name, seconds), seconds)
        if batches is not None:
            self.batches[name] = min(self.batches.get(name, batches), batches)

    def record(self, name: str, result: "QueryTimes | float") -> None:
        """A case's result: a streaming query's times, or the seconds of a case without Spark."""
        if isinstance(result, QueryTimes):
            self.add(name, result.seconds, result.batches)
        else:
            self.add(name, result)

    def micro_batch_line(self, title: str, names: tuple[str, ...], peer: str, peer_name: str,
                         ratios: tuple[tuple[str, str], ...]) -> str:
        """``title``'s micro-batches alone, ``names`` in order, and ``peer``'s time over each of
        ``ratios`` (``(case, label)``) when the peer ran."""
        batches = self.batches
        line = (f"{title} micro-batch alone (durationMs.triggerExecution, the query's start left out): "
                + ", ".join(f"{name} {batches[name]:.2f} s" for name in names if name in batches))
        if peer in batches:
            line += "; " + ", ".join(f"{label} / {peer_name} {batches[peer] / batches[case]:.2f}x"
                                     for case, label in ratios)
        return line
