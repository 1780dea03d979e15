"""The source reader (Flink's SourceReader), run on executors.

A reader reads one split at a time inside a Spark task and yields either tuples (one per row,
in schema order) or ``pyarrow.RecordBatch``es. Record batches are the fast path: prefer them.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from sparklink.source.split import Split


class SourceReader(ABC):
    """Reads splits on an executor. Instances are created inside the task; they may hold open
    files or connections, which are closed in :meth:`close`."""

    @abstractmethod
    def read(self, split: Split) -> Iterator[pa.RecordBatch] | Iterator[tuple[Any, ...]]:
        """Yield all records of ``split``. Called once per split in a task; a retried task calls
        it again from the split's start, so the result must be the same every time."""

    def close(self) -> None:
        """Release what :meth:`read` opened. Called once per task, also after a failure."""
