"""The sink (Flink's Sink with SupportsCommitter): factories for writers and the committer.

A sink is built from the connector's string options on the driver (validating them there),
pickled to executors, and asked there for a writer per task. On the driver it provides the
committer and the hooks the commit protocol calls: where its commit log lives, how to throw
away staged output, and what to do after a commit.

Its lifecycle on the driver (:mod:`sparklink.sink.recovery` drives it): Spark builds the sink
anew for every micro-batch, so a constructor only validates options. Recovery is a step of
its own, :meth:`Sink.restore`, run once per query run (and earlier when the cheap
per-micro-batch :meth:`Sink.check` finds something a restore must fix before tasks run);
:meth:`Sink.prepare_tasks` then loads what the micro-batch's tasks need.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyspark.sql.types import StructType

from sparklink.options import checkpoint_location
from sparklink.sink.committer import Committer
from sparklink.sink.lease import OutputLease
from sparklink.sink.writer import Committable, SinkWriter, WriterContext

if TYPE_CHECKING:
    from sparklink.sink.txn import Txn
    from sparklink.storage.directory import StorageDirectory, StorageFile



@dataclass(frozen=True, kw_only=True)
class RestoreContext:
    """Why and for whom :meth:`Sink.restore` runs (driver side).

    ``query_id`` is the streaming query's id (None when unknown); ``run_id`` the run whose
    first commit triggered the restore (None when a per-micro-batch check triggered it before
    the tasks ran); ``reason`` is said in the log.
    """

    query_id: str | None
    run_id: str | None
    reason: str


END_OF_INPUT_VERSION = 1


@dataclass(frozen=True, kw_only=True)
class EndOfInput:
    """A sink's end-of-input action: ``kind`` names one of the actions its connector declares
    (:attr:`sparklink.contract.ConnectorSpec.end_of_input`), ``target`` its
    argument (the file sink: the output's path). Small and JSON-serialisable: it is written by
    the worker that commits a micro-batch and read by the driver process
    (:mod:`sparklink.spark.end_of_input`)."""

    kind: str
    target: str

    def to_json(self) -> dict[str, Any]:
        return {"v": END_OF_INPUT_VERSION, "kind": self.kind, "target": self.target}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "EndOfInput":
        if data.get("v") != END_OF_INPUT_VERSION:
            raise ValueError(f"end-of-input note version {data.get('v')!r} is not supported")
        return cls(kind=data["kind"], target=data["target"])


class Sink(ABC):
    """Subclasses take options in ``__init__(options, schema)`` and validate them there."""

    def __init__(self, options: Mapping[str, str] | None, schema: StructType):
        self.options = dict(options or {})
        self.schema = schema
        self.lease_epoch: int | None = None  # set when a micro-batch is planned; travels to the tasks

    @classmethod
    def validate(cls, options: Mapping[str, str] | None, schema: StructType) -> None:
        """Check ``options`` against the input ``schema`` as the constructor does, with no side
        effect (nothing written, no connection opened): ConfigError naming the option
        (``sparklink run --check`` calls it before any query starts). The default checks nothing."""

    @abstractmethod
    def create_writer(self, context: WriterContext) -> SinkWriter:
        """A writer for one task (executor side)."""

    @abstractmethod
    def create_committer(self) -> Committer:
        """A committer for one commit (driver side)."""

    def commit_log_dir(self) -> StorageDirectory | None:
        """Where the commit log lives (driver side): a
        :class:`~sparklink.storage.directory.StorageDirectory` on any storage (on S3 written with
        conditional requests). The default is ``sparklink/commits`` in the query's checkpoint
        (:meth:`checkpoint_directory`); None disables the log (and with it exactly-once:
        at-least-once sinks)."""
        return self.checkpoint_directory("sparklink/commits")

    def checkpoint_directory(self, relative: str) -> StorageDirectory | None:
        """``relative`` under the query's checkpoint (``checkpointLocation``, a local directory
        as Spark's own checkpoint is here), None without a checkpoint (a ``df.write``)."""
        from sparklink.storage.directory import StorageDirectory
        from sparklink.storage.local import LocalStorage

        value = checkpoint_location(self.options)
        return StorageDirectory(LocalStorage(Path(value) / relative)) if value is not None else None

    def owner_lock_path(self) -> StorageFile | None:
        """The object (on any storage) that records which query owns the output; None: no
        single-owner check."""
        return None

    def lease(self) -> OutputLease | None:
        """The lease a running streaming query renews on the output (driver side, every
        micro-batch), for outside steps that must not run while a query writes (the file
        sink's ``sparklink.files.finish``); None: no lease (the default)."""
        return None

    def check(self) -> str | None:
        """Driver side, every micro-batch (when Spark plans it, and again in the worker that
        commits it): a cheap, read-only look at the sink's own metadata. Return why
        :meth:`restore` must run before this micro-batch's tasks (e.g. the last commit's state
        is missing), or None. The SDK has already looked at the owner claim and the last
        commit log entry."""
        return None

    def restore(self, context: RestoreContext) -> None:
        """Driver side, once per query run (Flink's ``restoreWriter`` and committer recovery),
        or earlier when :meth:`check` asks: check the sink's metadata, rebuild what can be
        rebuilt exactly (saying so in the log), refuse with an error naming the file and the
        way out otherwise, and clean up what earlier runs left. The SDK claims the owner before
        and rolls unfinished commits forward after. Must be idempotent, and safe while a
        micro-batch is in flight: it never removes what the open micro-batch staged."""

    def prepare_tasks(self) -> None:
        """Driver side, every micro-batch after the checks: load what this micro-batch's tasks
        need (the file sink: its carried in-progress files). It travels with the pickled sink."""

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

    def end_of_input(self) -> EndOfInput | None:
        """What makes everything committed visible when the query ends without a crash (Flink's
        end of bounded input), run on the driver once the query terminated; None: nothing (the
        default). See :mod:`sparklink.spark.end_of_input`."""
        return None

    def txn_committed(self, txn: "Txn") -> bool:
        """Driver side, before a ``df.write`` with ``txnAppId`` / ``txnVersion`` runs: whether that
        pair is already committed (see :mod:`sparklink.sink.txn`). The default looks for the
        pair's entry in the commit log; a sink without a log that can record the pair with its
        commit overrides this and :meth:`record_txn`; the others refuse the options."""
        from sparklink.errors import ConfigError
        from sparklink.sink.commit_log import CommitLog
        from sparklink.sink.txn import TXN_APP_ID

        log_dir = self.commit_log_dir()
        if log_dir is None:
            raise ConfigError(TXN_APP_ID, f"{type(self).__name__} cannot record an idempotent write with its "
                              "commit; write without txnAppId / txnVersion")
        return CommitLog(log_dir).get(CommitLog.key_for_job(txn.job_id)) is not None

    def record_txn(self, txn: "Txn") -> None:
        """Driver side, after the commit of a ``df.write`` with ``txnAppId`` / ``txnVersion`` on a
        sink without a commit log (with one, the log entry named after the pair is the record)."""

    def commit_log_retention(self) -> int:
        """How many finished micro-batch entries to keep in the commit log."""
        return 100
