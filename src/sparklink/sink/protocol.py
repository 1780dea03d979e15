"""The commit protocol that turns a sink into an exactly-once sink (driver side).

For each micro-batch, :func:`commit_batch` runs inside Spark's ``commit(messages, batchId)``:

1. roll forward any log entry left unfinished by a crash (idempotent commits);
2. if the batch is already in the log (Spark replays a batch whose commit it did not record),
   discard the replay's staged output and stop;
3. create the log entry (state ``committing``) atomically, only if none exists;
4. run the committer, with Flink's retry semantics;
5. rewrite the entry as ``finished`` and run the sink's post-commit hook.

The named fault points (``sink.before_log``, ``sink.after_log``, ``sink.after_commit``) let
tests crash the driver at each step.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable

from sparklink.errors import CommitError
from sparklink.faults import fault_point
from sparklink.sink.commit_log import STATE_COMMITTING, STATE_FINISHED, CommitLog, CommitLogEntry, owner_lock_at
from sparklink.sink.committer import CommitRequest, CommitStatus
from sparklink.sink.sink import Sink
from sparklink.sink.txn import Txn
from sparklink.sink.writer import Committable

LOG = logging.getLogger(__name__)
MAX_COMMIT_ATTEMPTS = 5
RETRY_BACKOFF_SECONDS = 0.2


def run_committer(sink: Sink, committables: list[Committable], batch_id: int | None) -> None:
    """Commit ``committables`` with retries; raise CommitError on an unknown failure."""
    requests = [CommitRequest(committable=c, batch_id=batch_id) for c in committables]
    committer = sink.create_committer()
    try:
        for attempt in range(MAX_COMMIT_ATTEMPTS):
            open_requests = [r for r in requests if r.status in (CommitStatus.PENDING, CommitStatus.RETRY)]
            if not open_requests:
                break
            for request in open_requests:
                request.status = CommitStatus.PENDING
                request.number_of_retries = attempt
            committer.commit(open_requests)
            for request in open_requests:
                if request.status == CommitStatus.PENDING:
                    request.status = CommitStatus.COMMITTED
                elif request.status == CommitStatus.FAILED_UNKNOWN:
                    raise CommitError(
                        f"commit of batch {batch_id} failed for {request.committable}: {request.failure}"
                    ) from request.failure
                elif request.status == CommitStatus.FAILED_KNOWN:
                    LOG.warning("batch %s: committable %s dropped: %s", batch_id, request.committable, request.failure)
            if any(r.status == CommitStatus.RETRY for r in requests):
                time.sleep(RETRY_BACKOFF_SECONDS * (attempt + 1))
        still_open = [r.committable for r in requests if r.status == CommitStatus.RETRY]
        if still_open:
            raise CommitError(f"commit of batch {batch_id} still asked for a retry after {MAX_COMMIT_ATTEMPTS} attempts: {still_open}")
    finally:
        committer.close()


def _finish(sink: Sink, log: CommitLog, entry: CommitLogEntry) -> None:
    run_committer(sink, entry.committables, entry.batch_id)
    entry.state = STATE_FINISHED
    entry.finished_at = time.time()
    log.put(entry)
    sink.post_commit(entry.batch_id, entry.committables)


def roll_forward(sink: Sink, log: CommitLog) -> list[str]:
    """Finish every entry a crash left in state ``committing``; return their keys."""
    done = []
    for entry in log.unfinished():
        LOG.info("rolling forward commit %s left unfinished by a crash", entry.key)
        _finish(sink, log, entry)
        done.append(entry.key)
    return done


def check_owner(sink: Sink, query_ids: Iterable[str | None]) -> None:
    lock_path = sink.owner_lock_path()
    if lock_path is None:
        return
    location = lock_path.directory.describe()
    for query_id in {q for q in query_ids if q}:
        owner_lock_at(lock_path, location_for_messages=location).claim(query_id)


def commit_batch(sink: Sink, batch_id: int | None, job_id: str, committables: list[Committable],
                 query_ids: Iterable[str | None] = (), *, extra: dict | None = None, txn: Txn | None = None) -> bool:
    """Commit one micro-batch (``batch_id``) or one batch job (``batch_id`` None) exactly once.

    ``extra`` is recorded in the batch's log entry (the run that committed it). Returns False
    when the batch was already committed and this call only discarded a replay. ``txn``: a
    ``df.write`` with ``txnAppId`` / ``txnVersion`` (:mod:`sparklink.sink.txn`), recorded as the
    log entry's name (or by the sink's :meth:`~sparklink.sink.sink.Sink.record_txn` without a log).
    """
    check_owner(sink, query_ids)
    log_dir = sink.commit_log_dir()
    if log_dir is None:  # at-least-once sink: no log, no replay detection
        run_committer(sink, committables, batch_id)
        if txn is not None:
            sink.record_txn(txn)
        sink.post_commit(batch_id, committables)
        return True
    log = CommitLog(log_dir)
    if batch_id is None:
        roll_forward(sink, log)
    else:  # the run's restore rolled everything forward; only the last entry can be open
        latest = log.latest_batch_entry()
        if latest is not None and not latest.finished:
            roll_forward(sink, log)
    key = CommitLog.key_for_batch(batch_id) if batch_id is not None else \
        CommitLog.key_for_job(txn.job_id if txn is not None else job_id)
    latest_id = log.latest_batch_id()
    already = log.get(key) is not None or (batch_id is not None and latest_id is not None and batch_id < latest_id)
    if already and txn is not None:
        LOG.warning("df.write %s is already committed; skipped", txn)
        sink.discard(committables)
        return False
    if already:
        LOG.info("batch %s is already committed; discarding the replay's staged output", key)
        sink.discard(committables)
        return False
    fault_point("sink.before_log", batch_id=batch_id)
    entry = CommitLogEntry(key=key, batch_id=batch_id, state=STATE_COMMITTING, committables=committables,
                           extra=dict(extra or {}))
    log.create(entry)
    fault_point("sink.after_log", batch_id=batch_id)
    _finish(sink, log, entry)
    if batch_id is not None:
        log.purge_batches_before(batch_id - sink.commit_log_retention() + 1)
    fault_point("sink.after_commit", batch_id=batch_id)
    return True
