"""The sink lifecycle on the driver: the per-micro-batch check and the once-per-run restore.

Spark builds a new sink for every micro-batch (and again in the worker that commits it), and
the driver side never learns the run (see :mod:`sparklink.spark.checkpoint`). So recovery is
keyed on what the commit protocol can see:

* :func:`prepare_micro_batch` runs whenever the adapter builds a stream writer. It looks at
  three small things: the owner claim, the last commit log entry, and :meth:`Sink.check`.
  If anything needs recovery before tasks run (another query's or a damaged owner claim, a
  commit a crash left unfinished, the sink's own metadata out of step) it restores right
  there (and the run's first commit restores once more, as it cannot know it happened).
* :func:`restore_for_run` runs in the commit of a micro-batch. Every commit log entry records
  the run that wrote it (the write tasks report the run id); the first commit of a run whose
  id differs from the last entry's restores before it commits. So each run restores at its
  start, and at most twice if its first micro-batch only replays a committed one.

:func:`restore` is the one SDK step: claim the owner, :meth:`Sink.restore`, roll unfinished
commits forward.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from contextlib import nullcontext

from sparklink.errors import MetadataError
from sparklink.sink.commit_log import CommitLog, OwnerLock, owner_lock_at
from sparklink.sink.lease import DriverIdentity
from sparklink.sink.protocol import commit_batch, roll_forward
from sparklink.sink.sink import RestoreContext, Sink
from sparklink.sink.writer import Committable

LOG = logging.getLogger(__name__)
RUN_ID_KEY = "runId"


def _owner_lock(sink: Sink) -> OwnerLock | None:
    path = sink.owner_lock_path()
    if path is None:
        return None
    return owner_lock_at(path, location_for_messages=path.directory.storage.describe())


def reason_to_restore(sink: Sink, query_id: str | None) -> str | None:
    """Why the sink must be restored before this micro-batch's tasks run, or None (reads at
    most three small files)."""
    lock = _owner_lock(sink)
    if lock is not None and query_id is not None:
        try:
            owner = lock.owner()
        except MetadataError as exc:
            return str(exc)
        if owner is not None and owner != query_id:  # no claim yet: the run's first commit claims it
            return f"the output is claimed by query {owner}"
    log_dir = sink.commit_log_dir()
    if log_dir is not None:
        try:
            latest = CommitLog(log_dir).latest_batch_entry()
        except MetadataError as exc:
            return str(exc)
        if latest is not None and not latest.finished:
            return f"commit {latest.key} was left unfinished"
    return sink.check()


def restore(sink: Sink, context: RestoreContext) -> None:
    """The SDK's recovery step: claim the owner, the sink's own restore, roll forward."""
    LOG.info("restoring %s: %s", type(sink).__name__, context.reason)
    lock = _owner_lock(sink)
    if lock is not None and context.query_id is not None:
        lock.claim(context.query_id)
    sink.restore(context)
    log_dir = sink.commit_log_dir()
    if log_dir is not None:
        roll_forward(sink, CommitLog(log_dir))


def prepare_micro_batch(sink: Sink, *, query_id: str | None, driver: DriverIdentity) -> None:
    """Driver side, whenever a stream writer is built (each micro-batch, planning and commit).
    With a lease (:meth:`Sink.lease`), all of it runs under the lease's lock and renews it for
    ``driver`` (the query's driver, as the Spark adapter found it); the lease's epoch goes to the
    tasks with the sink (``sink.lease_epoch``)."""
    lease = sink.lease() if query_id is not None else None
    with lease.exclusive() if lease is not None else nullcontext():
        reason = reason_to_restore(sink, query_id)
        if reason is not None:
            restore(sink, RestoreContext(query_id=query_id, run_id=None, reason=reason))
        if lease is not None and query_id is not None:
            sink.lease_epoch = lease.renew(query_id, driver=driver)
        sink.prepare_tasks()


def restore_for_run(sink: Sink, log: CommitLog, *, run_id: str, query_id: str | None) -> bool:
    """Driver side, in the commit of a micro-batch: restore if this is the run's first commit.
    True if it restored."""
    try:
        latest = log.latest_batch_entry()
    except MetadataError:
        latest = None  # the restore below reports it
    if latest is not None and latest.extra.get(RUN_ID_KEY) == run_id:
        return False
    restore(sink, RestoreContext(query_id=query_id, run_id=run_id, reason=f"first commit of run {run_id}"))
    return True


def commit_micro_batch(sink: Sink, batch_id: int, job_id: str, committables: list[Committable], *,
                       query_ids: list[str | None], run_ids: list[str | None], driver: DriverIdentity,
                       lease_epochs: Sequence[int | None] = ()) -> bool:
    """Driver side, Spark's ``commit(messages, batchId)``: the run's first commit restores, then
    the batch is committed with its run recorded in the log entry. ``query_ids`` / ``run_ids`` /
    ``lease_epochs`` are what the batch's tasks reported (empty when no task ran); ``driver``
    the query's driver (renewing the lease). With a
    lease, the whole commit runs under its lock: a batch planned under another lease epoch (a
    finish published meanwhile) is refused (:func:`~sparklink.sink.lease.check_fence`, inside the
    lease's conditional renewal), else
    the lease is renewed and the batch committed."""
    run_id = next((r for r in run_ids if r), None)
    query_id = next((q for q in query_ids if q), None)
    lease = sink.lease() if query_id is not None else None
    with lease.exclusive() if lease is not None else nullcontext():
        if lease is not None and query_id is not None:
            lease.renew(query_id, driver=driver, planned_epochs=list(lease_epochs), batch_id=batch_id)
        log_dir = sink.commit_log_dir()
        if run_id is not None and log_dir is not None:
            restore_for_run(sink, CommitLog(log_dir), run_id=run_id, query_id=query_id)
        return commit_batch(sink, batch_id, job_id, committables, query_ids,
                            extra={RUN_ID_KEY: run_id} if run_id else None)
