"""The sink (Flink's Sink with SupportsCommitter): factories for writers and the committer.

A sink is built from the connector's string options on the driver (validating them there),
pickled to executors, and asked there for a writer per task. On the driver it provides the
committer and the hooks the commit protocol calls: where its commit log lives, how to throw
away staged output, and what to do after a commit.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from pathlib import Path

from pyspark.sql.types import StructType

from sparklink.sink.committer import Committer
from sparklink.sink.writer import Committable, SinkWriter, WriterContext

OPTION_CHECKPOINT_LOCATION = "checkpointLocation"


class Sink(ABC):
    """Subclasses take options in ``__init__(options, schema)`` and validate them there."""

    def __init__(self, options: Mapping[str, str] | None, schema: StructType):
        self.options = dict(options or {})
        self.schema = schema

    @abstractmethod
    def create_writer(self, context: WriterContext) -> SinkWriter:
        """A writer for one task (executor side)."""

    @abstractmethod
    def create_committer(self) -> Committer:
        """A committer for one commit (driver side)."""

    def commit_log_dir(self) -> Path | None:
        """Where the commit log lives (driver side). The default is a folder in the query's
        checkpoint; None disables the log (and with it exactly-once: at-least-once sinks)."""
        for key, value in self.options.items():
            if key.lower() == OPTION_CHECKPOINT_LOCATION.lower():
                return Path(value) / "sparklink" / "commits"
        return None

    def owner_lock_path(self) -> Path | None:
        """The file that records which query owns the output; None: no single-owner check."""
        return None

    def discard(self, committables: list[Committable]) -> None:
        """Remove staged output that will never be committed (driver side): a failed job, or a
        replay of a batch that is already committed. Must tolerate missing files."""

    def abort_job(self, job_id: str, committables: list[Committable]) -> None:
        """Spark aborted the ``df.write`` job ``job_id`` (driver side, once): remove what its
        successful tasks staged (``committables``) and, where the sink can find them, the files
        of tasks that failed mid-write. The default discards the committables."""
        self.discard(committables)

    def post_commit(self, batch_id: int | None, committables: list[Committable]) -> None:
        """After every committable of a batch is committed (Flink's post-commit topology):
        clean-up of leftovers from other attempts, metrics. Runs on the driver; must be
        idempotent, as a crash may repeat it."""

    def commit_log_retention(self) -> int:
        """How many finished micro-batch entries to keep in the commit log."""
        return 100
