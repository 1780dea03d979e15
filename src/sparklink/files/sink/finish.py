"""Finishing a file sink's output after its query stopped (driver side, once, when a bounded run
ended): :func:`finish_output`, Spark-free. The public ``sparklink.files.finish(spark, path)`` is
the Spark adapter's :func:`sparklink.spark.finish.finish`, which finds the drivers (which process
finishes, which JVM is the session's) and the session's active queries and hands them here.

A streaming file sink keeps two kinds of files hidden across micro-batches: pending files held
for compaction (``compaction.*``) and in-progress files the ``default`` rolling policy carries
to the next batch. Flink finishes them at the end of a bounded input; on Spark, a query that
ends (``trigger(availableNow=True)``) does not tell the sink, so they stay invisible until a
later run commits. :func:`finish` commits them: held files are compacted per bucket (one held
file is finished as it is), carried files are copied at their committed length.

Protocol (every step idempotent, so a crash at any point is rolled forward by the next
``finish`` or by the next start of the query):

1. the sink's own roll-forward (an unfinished commit, an earlier interrupted finish);
2. the finishing state ``F`` (derived from the last committed state ``N``) is written to
   ``_sparklink/finish.json`` atomically: from here the finish is decided (fault point
   ``finish.after_intent``);
3. ``F`` is applied by the sink's committer: renames, compactions, and one batch in Spark's log;
4. state ``N`` is rewritten (atomically) with ``F``'s files added and nothing held or carried
   (``finish.after_state``);
5. ``finish.json`` is removed.

On local disk carried files are copied up to their committed length into a new finished file
(then removed), never renamed: a micro-batch still writing to one cannot change what was
published. On S3 a carried file is a multipart upload whose parts and tail object the last
commit recorded: its upload is completed with exactly those (the tail uploaded as the last
part), which fixes its content for good (a task still writing to it fails: the upload is gone),
so nothing is copied; the tail objects of attempts no commit named are then deleted.

Everything is read and written through the output's storage (:mod:`sparklink.storage`): the
same steps on local disk and S3 (``s3://`` / ``s3a://``; the S3 settings -- endpoint,
credentials -- come from ``options=`` or the AWS environment, as the sink's record holds no
secret). The steps a restart also runs (the sink's record, the finishing state, resuming an
interrupted finish) are in :mod:`sparklink.files.sink.recovery`.

The sink's options and schema are read from ``_sparklink/sink.json``, which the sink records
when a query (or ``df.write``) starts.

Refused while a query owns the output, in any driver: every micro-batch renews a lease on the
output (``_sparklink/lease.json``, see :mod:`sparklink.sink.lease`), valid until its renewal
plus the sink's ``leaseTimeout`` (10 minutes by default). ``finish`` takes the output over only
when no query holds it: the lease expired, or the driver that renewed it is observably gone
(same machine, process ended), or the query ran in the caller's own session and has stopped.
Taking over increases the lease's epoch, and all of it runs under the lease's lock, the one a
commit holds: a micro-batch planned before the finish is refused at its commit, so a query
that was still alive after its lease expired fails loudly instead of committing over the
finished output.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparklink.errors import CommitError, ConfigError
from sparklink.faults import fault_point
from sparklink.files.sink.connector import FileSinkConnector
from sparklink.files.sink.layout import FINISH_INTENT, SINK_RECORD, OutputLayout
from sparklink.files.sink.recovery import (
    CREDENTIAL_OPTIONS,
    RECORD_VERSION,
    finishing_state,
    read_record,
    resume_finish,
)
from sparklink.files.sink.state import SinkState
from sparklink.sink.commit_log import json_bytes
from sparklink.sink.lease import DriverIdentity
from sparklink.storage import S3_OPTIONS, parse_location
from sparklink.storage.directory import StorageDirectory
from sparklink.storage.output import OutputStorage


@dataclass(frozen=True, kw_only=True)
class FinishResult:
    """What one call finished: ``finished`` files made visible as they were (renamed),
    ``copied`` carried files copied at their committed length, ``compacted`` files written by
    compacting held files (only with ``compaction.*``)."""

    path: str
    finished: int
    compacted: int
    copied: int = 0
    completed: int = 0  # S3: carried files whose upload was completed at its committed length

    @property
    def files(self) -> int:
        return self.finished + self.compacted + self.copied + self.completed

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "finished": self.finished, "compacted": self.compacted, "copied": self.copied,
                "completed": self.completed}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "FinishResult":
        return cls(path=str(data["path"]), finished=int(data["finished"]), compacted=int(data["compacted"]),
                   copied=int(data["copied"]), completed=int(data["completed"]))

    def summary(self) -> str:
        """One line for a person: what became visible."""
        carried = (f"{self.completed} carried file(s) completed at their committed length" if self.completed
                   else f"{self.copied} carried file(s) copied")
        return f"{self.finished} held file(s) finished, {carried}, {self.compacted} compacted file(s) written"


def output_meta(path: str | Path, options: Mapping[str, str] | None = None) -> tuple[str, StorageDirectory]:
    """``path`` (a local path, ``file:`` URI, ``s3://`` or ``s3a://`` URI; any other scheme
    refused naming it) as the output's path for messages and its ``_sparklink`` directory on
    the output's storage (S3 settings from ``options``, else the AWS environment). Driver side."""
    location = parse_location("path", str(path))
    for key in options or {}:
        if key.lower() not in {o.lower() for o in S3_OPTIONS}:
            raise ConfigError(key, "is not an S3 setting: sparklink.files.finish takes only the S3 settings of the "
                              "output (the sink's other options are read from its record)", ", ".join(S3_OPTIONS))
    store = OutputStorage.from_options(location, options or {})  # S3 settings refused for a local path
    return store.uri(), OutputLayout(store.storage()).meta


def _sink_from_record(path: str, meta: StorageDirectory,
                      settings: Mapping[str, str] | None = None) -> FileSinkConnector:
    from pyspark.sql.types import StructType

    record = read_record(meta)
    if record is None:
        raise CommitError(f"{path} is not a sparklink file sink output written by this version "
                          f"({meta.uri(SINK_RECORD)} is missing: run the query once to record it)")
    if record.get("v") != RECORD_VERSION:
        raise CommitError(f"{meta.uri(SINK_RECORD)}: version {record.get('v')!r} is not supported")
    options = {k: v for k, v in record["options"].items() if k.lower() not in CREDENTIAL_OPTIONS}  # older records
    options = dict(options, **(settings or {}), path=path)
    return FileSinkConnector(options, StructType.fromJson(record["schema"]))


def finish_output(path: str | Path, *, driver: DriverIdentity, session_drivers: frozenset[DriverIdentity] = frozenset(),
                  now: float | None = None,
                  active_queries: frozenset[str] | Callable[[], frozenset[str]] = frozenset(),
                  options: Mapping[str, str] | None = None) -> FinishResult:
    """Finish the held and carried files of a stopped sink output (no Spark session needed).
    Takes the output's lease over first (ConcurrentWriterError while a query holds it); the
    whole finish runs under the lease's lock. ``driver`` is the process that finishes (its
    identity goes into the lease while it finishes); ``session_drivers`` / ``active_queries``
    describe the caller's Spark session (its JVM; a callable is asked under the lock, so a
    query restarted while the finish waited for the lock counts as active): a query that renewed
    the lease from ``driver`` or from one of ``session_drivers`` and is not active has stopped,
    and is finished at once. ``options``: S3 settings (``s3.endpoint``, ``s3.accessKeyId``, ...;
    see :func:`sparklink.spark.finish.finish`)."""
    import time

    from sparklink.sink.recovery import restore
    from sparklink.sink.sink import RestoreContext

    output, meta = output_meta(path, options)
    sink = _sink_from_record(output, meta, options)
    lease = sink.lease()
    with lease.exclusive():
        drivers = session_drivers | {driver}
        active = active_queries() if callable(active_queries) else active_queries
        lease.ensure_free(by="sparklink.files.finish", now=now, session_drivers=drivers, active_queries=active)
        store = sink.state_store()
        resumed = _interrupted_finish(sink, meta)  # an earlier finish decided this: counted as done by this one
        restore(sink, RestoreContext(query_id=None, run_id=None, reason="sparklink.files.finish"))  # also resumes a finish
        last = store.latest_before(None)
        finishing = finishing_state(sink, last, now=now if now is not None else time.time())
        if finishing is not None:
            lease.fence(driver=driver, now=now)
            meta.put(FINISH_INTENT, json_bytes({"v": RECORD_VERSION, "state": finishing.to_json()}))
            fault_point("finish.after_intent", batch_id=last.batch_id)
            resume_finish(sink)
        # no query writes the output now: on S3, abort the uploads of an interrupted finish's compaction and
        # delete the tail objects of finished carried files that attempts no commit named left behind
        sink.sweep_after(store.latest_before(None))
    done = [_counts(sink, before, state) for before, state in (resumed, (last, finishing)) if state is not None]
    return FinishResult(path=output, **{key: sum(c[key] for c in done) for key in _COUNTS})


_COUNTS = ("finished", "compacted", "copied", "completed")


def end_of_input(target: str, *, driver: DriverIdentity, session_drivers: frozenset[DriverIdentity],
                 active_queries: Callable[[], frozenset[str]]) -> str:
    """The file sink's end-of-input action (``files.finish`` in the connector contract, run on the
    driver's machine by :mod:`sparklink.spark.end_of_input`, which passes the drivers): finish
    ``target``; its summary."""
    return finish_output(target, driver=driver, session_drivers=session_drivers,
                         active_queries=active_queries).summary()


def _interrupted_finish(sink: FileSinkConnector, meta: StorageDirectory) -> tuple[SinkState | None, SinkState | None]:
    """The finishing state of a finish a crash (or a failed end of input) interrupted, and the
    state it finishes, as they were before the restore completes it (``(None, None)``: none)."""
    stored = meta.read(FINISH_INTENT)
    if stored is None:
        return None, None
    finishing = SinkState.from_json(json.loads(stored.data)["state"], source=meta.uri(FINISH_INTENT))
    return sink.state_store().get(finishing.batch_id), finishing


def _counts(sink: FileSinkConnector, last: SinkState | None, finishing: SinkState) -> dict[str, int]:
    """What applying ``finishing`` to ``last`` made visible, by kind."""
    compacted = len(finishing.compactions) if sink.config.compaction is not None else 0
    carried = {part.path for part in last.in_progress} if last is not None else set()
    completed = sum(1 for part in finishing.finish if part.path in carried)
    return {"finished": len(finishing.finish) - completed, "compacted": compacted,
            "copied": len(finishing.compactions) - compacted, "completed": completed}
