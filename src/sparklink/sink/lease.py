"""The lease a streaming query holds on its sink output, and the fence that stops a stale run
(driver side).

A Python data source has no driver-side code that lives as long as its query: Spark runs the
sink's driver-side steps (planning a micro-batch, committing it) in short-lived Python
workers. So "a query owns this output" cannot be a lock held for the query's lifetime; it is a
lease in ``<output>/_sparklink/lease.json`` that every micro-batch renews:

* ``queryId``: the holder (None after ``sparklink.files.finish`` took the output over);
* ``renewedAt`` / ``expiresAt``: the last renewal and the renewal plus the sink's
  ``leaseTimeout``;
* ``driver``: the driver process that renewed it (machine, pid, start time of the process:
  :class:`DriverIdentity`, the lease's record of it; which process is the driver is the Spark
  adapter's knowledge, :mod:`sparklink.spark.driver`, and every renewal and fence is handed it);
* ``epoch``: a counter that only an outside step that changes the committed state (finish)
  increases.

Who may take the output over (:meth:`OutputLease.holder`): nobody while the lease is held,
that is until ``expiresAt``, unless its driver is observably gone: the renewing driver ran on
this machine (same kernel boot and pid namespace) and its process no longer exists. A driver
on another machine is only ever waited out (``expiresAt``).

Fencing: planning a micro-batch renews the lease and hands its epoch to the micro-batch's
tasks, which return it with their commit messages; the commit renews again and refuses the
batch if the epoch changed meanwhile (:func:`check_fence`), i.e. if finish published files
while the batch's tasks ran from the state before. A micro-batch planned after the finish
reads the finished state and commits normally.

The lease is an object of the output's storage (local disk or S3), read and written through
the storage seam's metadata operations: every write is conditional on the version read
(create-if-absent, or replace-if-unchanged: on S3 ``If-None-Match: *`` / ``If-Match``), and a
refused condition makes the step read the lease again and decide again. So a renewal, a
fence and a takeover never overwrite a change they did not see.

Finishing holds the output too: :meth:`OutputLease.fence` marks the lease ``finishing``
(held by the finishing driver until it is released or expires), and a micro-batch planned
while it is held is refused with ConcurrentWriterError naming the finish (it never plans from
the state the finish is rewriting). The mark is released when the finish's
:meth:`OutputLease.exclusive` block ends, also when it failed (its intent, if written, is
then completed by the next start of the query or the next finish).

On local disk all reads-and-writes of the lease, and the whole of a commit and of a finish,
also run under an exclusive ``flock`` of ``lease.lock`` beside it (:meth:`OutputLease.exclusive`):
held only for the length of one step, and released by the kernel when the process dies, so a
crash never leaves it taken. That lock serialises a commit and a finish completely. An object
store has no such lock: there the conditional writes order the steps, and a commit renews the
lease before it writes anything, so a finish that sees it renewed is refused until the lease
expires. What a lock would add is protection against a driver that stalls for longer than
``leaseTimeout`` between its renewal and its commit log entry (a finish may then take over
meanwhile): keep ``leaseTimeout`` (10 minutes by default) far above any pause of the driver.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparklink.errors import CommitError, ConcurrentWriterError
from sparklink.sink.commit_log import parse_json_object
from sparklink.storage.directory import StorageDirectory

LEASE_VERSION = 2  # 2: the "finishing" mark (version 1, without it, is read as not finishing)
READ_VERSIONS = (1, LEASE_VERSION)
DEFAULT_LEASE_TIMEOUT = 600.0  # seconds
LEASE_NAME = "lease.json"
RENEWAL_FRACTION = 0.1  # a lease renewed by the same query and driver less than this much of the timeout ago is kept
_WRITE_ATTEMPTS = 5  # a refused conditional write is read and decided again, this many times in all
LOG = logging.getLogger(__name__)


class FencedError(CommitError):
    """A micro-batch planned before ``sparklink.files.finish`` published the output's held and
    carried files reached its commit: it is refused, nothing of it becomes visible."""


@dataclass(frozen=True, kw_only=True)
class DriverIdentity:
    """The process that renewed a lease: ``machine`` (kernel boot id and pid namespace),
    ``pid`` and the process's start time (so a reused pid is not taken for it)."""

    host: str
    machine: str | None
    pid: int
    started: str | None

    def to_json(self) -> dict[str, Any]:
        return {"host": self.host, "machine": self.machine, "pid": self.pid, "started": self.started}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "DriverIdentity":
        return cls(host=str(data.get("host")), machine=data.get("machine"), pid=int(data["pid"]),
                   started=data.get("started"))

    def is_gone(self) -> bool:
        """True only when this machine can tell that the process has ended (a driver on another
        machine, or a process this one cannot inspect, is never taken for gone)."""
        if self.machine is None or self.machine != this_machine():
            return False
        return process_start(self.pid) != self.started

    def __str__(self) -> str:
        return f"pid {self.pid} on {self.host}"


def this_machine() -> str | None:
    """Kernel boot id and pid namespace: two processes with the same value see the same pids."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text(encoding="ascii").strip()
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        return None
    return f"{boot}/{namespace}"


def process_stat(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (None: no such process)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    return text[text.rfind(")") + 2:].split()


def process_start(pid: int) -> str | None:
    """The start time of a live process (None: no such process, or a zombie)."""
    fields = process_stat(pid)
    if fields is None or fields[0] in ("Z", "X"):
        return None
    return fields[19]


def process_identity(pid: int | None = None) -> DriverIdentity:
    """The identity of process ``pid`` (default: this process) on this machine. Which process is
    a query's driver (the driver's JVM, found from a Python worker or a session) is the Spark
    adapter's knowledge (:mod:`sparklink.spark.driver`), handed to the lease by its callers."""
    pid = os.getpid() if pid is None else pid
    return DriverIdentity(host=socket.gethostname(), machine=this_machine(), pid=pid, started=process_start(pid))


@dataclass(frozen=True, kw_only=True)
class LeaseState:
    """What ``lease.json`` says. ``finishing``: a ``sparklink.files.finish`` (``driver``) holds
    the output until ``expiresAt`` or until it releases it."""

    query_id: str | None
    epoch: int
    renewed_at: float
    expires_at: float
    driver: DriverIdentity | None
    finishing: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"v": LEASE_VERSION, "queryId": self.query_id, "epoch": self.epoch, "renewedAt": self.renewed_at,
                "expiresAt": self.expires_at, "driver": self.driver.to_json() if self.driver else None,
                "finishing": self.finishing}

    @classmethod
    def from_json(cls, data: dict[str, Any], *, source: str) -> "LeaseState":
        if data.get("v") not in READ_VERSIONS:
            raise CommitError(f"{source}: lease version {data.get('v')!r} is not supported")
        try:
            return cls(query_id=data["queryId"], epoch=int(data["epoch"]), renewed_at=float(data["renewedAt"]),
                       expires_at=float(data["expiresAt"]),
                       driver=DriverIdentity.from_json(data["driver"]) if data.get("driver") else None,
                       finishing=bool(data.get("finishing", False)))
        except (KeyError, TypeError, ValueError) as exc:
            raise CommitError(f"lease {source} is damaged ({exc}); delete it if no query writes to this "
                              "output") from None

    def holds(self, *, now: float) -> bool:
        """Whether a query (or a finish) holds the output: not expired, and its driver not
        observably gone."""
        if (self.query_id is None and not self.finishing) or now >= self.expires_at:
            return False
        return self.driver is None or not self.driver.is_gone()


class OutputLease:
    """The lease object (``<output>/_sparklink/lease.json``) of one output (driver side).

    ``directory``: a :class:`StorageDirectory` on any storage, holding the lease object
    ``name``. ``output`` names the output in messages."""

    def __init__(self, *, directory: StorageDirectory, timeout: float = DEFAULT_LEASE_TIMEOUT,
                 name: str = LEASE_NAME, output: str | None = None):
        self.dir, self.name = directory, name
        self.path = self.dir.uri(name)  # for messages
        self.output = output or directory.storage.describe()
        self.timeout = timeout
        self._version: str | None = None  # the version of the lease this object last read (None: absent)
        self._last: LeaseState | None = None  # and what it said
        self._has_read = False
        self._fenced: DriverIdentity | None = None  # the finishing driver whose mark this object set (:meth:`fence`)

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        """One step (a renewal, a commit, a finish) on the lease, under the storage's exclusive
        lock of the lease (:meth:`FileStorage.exclusive`: a lock file beside it on local disk, not
        re-entrant; none on S3). Releases a finish's mark (:meth:`fence`) at the end."""
        with self.dir.storage.exclusive(self.dir.key(self.name)):
            try:
                yield
            finally:
                if self._fenced is not None:
                    self._release()

    def read(self) -> LeaseState | None:
        stored = self.dir.read(self.name)
        self._version = stored.version if stored is not None else None
        self._last = None if stored is None else LeaseState.from_json(
            parse_json_object(stored.data, source=self.path, what="lease"), source=self.path)
        self._has_read = True
        return self._last

    def _write(self, state: LeaseState) -> bool:
        """Write ``state`` if the lease is still as this object last read it."""
        data = json.dumps(state.to_json(), separators=(",", ":")).encode("utf-8")
        if self._version is None:
            version = self.dir.create_if_absent(self.name, data)
        else:
            version = self.dir.replace(self.name, data, expected_version=self._version)
        if version is None:
            return False
        self._version, self._last = version, state
        return True

    def renew(self, query_id: str, *, driver: DriverIdentity, now: float | None = None,
              planned_epochs: list[int | None] | None = None, batch_id: int | None = None) -> int:
        """Under :meth:`exclusive`: ``query_id``, whose driver is ``driver`` (the Spark adapter's
        :func:`sparklink.spark.driver.current_driver`), holds the output until now + timeout. Returns the
        epoch (unchanged by a renewal). Refused (ConcurrentWriterError) while a finish holds the
        output. A lease this query's driver renewed less than a tenth of the timeout ago is not
        written again (it is held for nine tenths of the timeout still, so a finish is refused
        just the same): most micro-batches then only read it (one GET on S3). ``planned_epochs`` (a commit: the epochs its tasks were planned under) are checked
        against the lease in the same conditional write (:func:`check_fence`)."""
        now = time.time() if now is None else now
        for _ in range(_WRITE_ATTEMPTS):
            current = self.read()
            if current is not None and current.finishing and current.holds(now=now):
                raise ConcurrentWriterError(
                    f"sparklink.files.finish is finishing {self.output}: its driver ({current.driver}) took the output "
                    f"over at {_utc(current.renewed_at)} and holds it until it is done (at the latest until "
                    f"{_utc(current.expires_at)}). Restart the query when the finish has ended")
            if planned_epochs is not None:
                _refuse_if_fenced(self, current, planned_epochs, batch_id=batch_id)
            epoch = current.epoch if current is not None else 0
            if (current is not None and current.query_id == query_id and not current.finishing
                    and current.driver == driver and 0 <= now - current.renewed_at < self.timeout * RENEWAL_FRACTION):
                return epoch  # renewed moments ago by this query's driver: held for most of the timeout still
            if self._write(LeaseState(query_id=query_id, epoch=epoch, renewed_at=now, expires_at=now + self.timeout,
                                      driver=driver)):
                return epoch
        raise ConcurrentWriterError(f"lease {self.path} kept changing while query {query_id} renewed it "
                                    f"({_WRITE_ATTEMPTS} conditional writes refused): another writer is at work")

    def ensure_free(self, *, by: str, now: float | None = None,
                    session_drivers: frozenset[DriverIdentity] = frozenset(),
                    active_queries: frozenset[str] = frozenset()) -> None:
        """Under :meth:`exclusive`: raise ConcurrentWriterError, naming the holder, while a query
        (or another finish) holds the output. A holder that renewed from one of ``session_drivers``
        (the caller's process, its Spark session's JVM) and is not in ``active_queries`` has
        stopped in the caller's own session: the output is free at once."""
        now = time.time() if now is None else now
        current = self.read()
        if current is None or (current.query_id is None and not current.finishing):
            return
        if current.query_id in active_queries:
            raise ConcurrentWriterError(f"streaming query {current.query_id} is running in this session and owns "
                                        f"{self.output}; stop it (query.stop() or let it end) before {by}")
        if current.holds(now=now) and current.driver not in session_drivers:
            holder = ("another sparklink.files.finish" if current.query_id is None
                      else f"streaming query {current.query_id}")
            raise ConcurrentWriterError(
                f"{holder} owns {self.output}: its driver ({current.driver}) "
                f"renewed the lease at {_utc(current.renewed_at)} and holds it until {_utc(current.expires_at)} "
                f"(leaseTimeout {self.timeout:g}s). Stop that query and retry {by}; if its driver is gone for "
                "good, retry after that time")

    def fence(self, *, driver: DriverIdentity, now: float | None = None) -> int:
        """Under :meth:`exclusive`, after :meth:`ensure_free`, before changing the committed
        state, by the finishing process ``driver``: end the query's lease, increase its epoch (a micro-batch planned before is refused
        at its commit) and mark it ``finishing`` until :meth:`exclusive` ends (a micro-batch is
        not planned meanwhile). Written only if the lease is still as :meth:`ensure_free` read
        it, else ConcurrentWriterError. Returns the new epoch."""
        now = time.time() if now is None else now
        current = self._last if self._has_read else self.read()
        epoch = (current.epoch if current is not None else 0) + 1
        if not self._write(LeaseState(query_id=None, epoch=epoch, renewed_at=now, expires_at=now + self.timeout,
                                      driver=driver, finishing=True)):
            raise ConcurrentWriterError(f"lease {self.path} changed after it was found free: a query took "
                                        f"{self.output} over meanwhile; retry when it has stopped")
        self._fenced = driver
        return epoch

    def _release(self) -> None:
        """End this finish's mark (the lease stays free, its epoch kept)."""
        driver, self._fenced = self._fenced, None
        assert driver is not None, "released without a fence"
        for _ in range(_WRITE_ATTEMPTS):
            current = self.read()
            if current is None or not current.finishing or current.driver != driver:
                return
            if self._write(LeaseState(query_id=None, epoch=current.epoch, renewed_at=current.renewed_at,
                                      expires_at=current.renewed_at, driver=current.driver)):
                return
        LOG.warning("could not release the finishing mark of %s; it expires at the lease's timeout", self.path)


def check_fence(lease: OutputLease, epochs: list[int | None], *, batch_id: int) -> None:
    """Under :meth:`OutputLease.exclusive`, in a micro-batch's commit: refuse the batch if its
    tasks were planned under another epoch than the lease's current one. (A commit renews with
    ``OutputLease.renew(planned_epochs=...)``, which checks this in its conditional write.)"""
    _refuse_if_fenced(lease, lease.read(), epochs, batch_id=batch_id)


def _refuse_if_fenced(lease: OutputLease, current: LeaseState | None, epochs: list[int | None], *,
                      batch_id: int | None) -> None:
    planned = {e for e in epochs if e is not None}
    if current is None or not planned or planned == {current.epoch}:
        return
    raise FencedError(
        f"micro-batch {batch_id} was planned before sparklink.files.finish published the held and carried files "
        f"of {lease.output} (at {_utc(current.renewed_at)}, lease epoch {current.epoch}, the batch's "
        f"{sorted(planned)}): this query's lease had expired (no micro-batch for longer than leaseTimeout, "
        f"{lease.timeout:g}s) while the query still ran. The batch is not committed; restart the query: it goes "
        "on from the finished output, nothing is lost or written twice")


def _utc(epoch_seconds: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(epoch_seconds))
