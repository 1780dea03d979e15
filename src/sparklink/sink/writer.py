"""The sink writer (Flink's SinkWriter / CommittingSinkWriter), run on executors.

One writer is created per Spark write task. It receives the task's data, stages it so that
nothing is visible yet, and on :meth:`prepare_commit` returns *committables*: small JSON
values that tell the driver-side :class:`~sparklink.sink.committer.Committer` how to make
the staged data visible.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

Committable = dict[str, Any]


@dataclass(frozen=True, kw_only=True)
class WriterContext:
    """Where a writer runs (executor side, one per task attempt).

    ``batch_id`` is the micro-batch id for ``df.writeStream`` and None for ``df.write``;
    ``job_id`` is unique per write job (one micro-batch attempt or one batch job) and is the
    same in every task of that job; ``query_id`` is the streaming query's id (stable across
    restarts from one checkpoint), None for batch jobs; ``run_id`` is the id of this run of
    the streaming query (new at every start), None for batch jobs.
    """

    partition_id: int
    attempt_number: int
    task_attempt_id: int
    job_id: str
    batch_id: int | None
    query_id: str | None
    run_id: str | None = None

    @property
    def streaming(self) -> bool:
        return self.batch_id is not None


class SinkWriter(ABC):
    """Stages one task's records. Created inside the task; may hold open files/connections.

    The adapter calls :meth:`write_batch` for each Arrow record batch, then :meth:`flush`,
    then :meth:`prepare_commit`, then :meth:`close`. If anything fails it calls
    :meth:`abort` (to remove what was staged) and then :meth:`close`.
    """

    def write_batch(self, batch: pa.RecordBatch) -> None:
        """Stage a record batch. The default hands each row to :meth:`write`; sinks on a hot
        path override this and never go row by row."""
        for row in batch.to_pylist():
            self.write(row)

    def write(self, row: dict[str, Any]) -> None:
        """Stage one row (a dict of column name to value)."""
        raise NotImplementedError(f"{type(self).__name__} implements neither write_batch nor write")

    def flush(self) -> None:
        """Push buffered records to staging (end of the task's input)."""

    @abstractmethod
    def prepare_commit(self) -> list[Committable]:
        """Committables for everything staged by this task (JSON values, small)."""

    def abort(self) -> None:
        """Remove what this attempt staged; the task failed. Must not raise for missing files."""

    def close(self) -> None:
        """Release handles. Called once at the end of the task, after success or failure."""
