"""The lease a streaming query holds on its sink output, and the fence that stops a stale run
(driver side).

A Python data source has no driver-side code that lives as long as its query: Spark runs the
sink's driver-side steps (planning a micro-batch, committing it) in short-lived Python
workers. So "a query owns this output" cannot be a lock held for the query's lifetime; it is a
lease in ``<output>/_sparklink/lease.json`` that every micro-batch renews:

* ``queryId``: the holder (None after ``sparklink.files.finish`` took the output over);
* ``renewedAt`` / ``expiresAt``: the last renewal and the renewal plus the sink's
  ``leaseTimeout``;
* ``driver``: the driver process that renewed it (machine, pid, start time of the process);
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

All reads-and-writes of the lease, and the whole of a commit and of a finish, run under an
exclusive ``flock`` of ``lease.lock`` beside it (:meth:`OutputLease.exclusive`): held only for
the length of one step, and released by the kernel when the process dies, so a crash never
leaves it taken. That lock is the serialisation point between a commit and a finish.
"""

from __future__ import annotations

import fcntl
import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparklink.errors import CommitError, ConcurrentWriterError
from sparklink.sink.commit_log import read_json_file, write_json_atomically

LEASE_VERSION = 1
DEFAULT_LEASE_TIMEOUT = 600.0  # seconds


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
        return _process_start(self.pid) != self.started

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


def _process_stat(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    return text[text.rfind(")") + 2:].split()  # the fields after the command name


def _process_start(pid: int) -> str | None:
    """The start time of a live process (None: no such process, or a zombie)."""
    fields = _process_stat(pid)
    if fields is None or fields[0] in ("Z", "X"):
        return None
    return fields[19]


def _process_name(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/comm").read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return None


def current_driver() -> DriverIdentity:
    """The driver this code runs for: in a Python worker the driver's JVM started, that JVM
    (found among the worker's first ancestors); elsewhere this process."""
    pid, ancestor = os.getpid(), os.getppid()
    for _ in range(3):
        if ancestor <= 1:
            break
        if _process_name(ancestor) == "java":
            pid = ancestor
            break
        fields = _process_stat(ancestor)
        ancestor = int(fields[1]) if fields else 0
    return DriverIdentity(host=socket.gethostname(), machine=this_machine(), pid=pid, started=_process_start(pid))


def driver_of_session(spark: Any) -> DriverIdentity | None:
    """The JVM of a classic SparkSession (None for Spark Connect or without a session)."""
    jvm = getattr(spark, "_jvm", None)  # classic sessions only
    if jvm is None:
        return None
    pid = int(jvm.java.lang.ProcessHandle.current().pid())
    return DriverIdentity(host=socket.gethostname(), machine=this_machine(), pid=pid, started=_process_start(pid))


@dataclass(frozen=True, kw_only=True)
class LeaseState:
    """What ``lease.json`` says."""

    query_id: str | None
    epoch: int
    renewed_at: float
    expires_at: float
    driver: DriverIdentity | None

    def to_json(self) -> dict[str, Any]:
        return {"v": LEASE_VERSION, "queryId": self.query_id, "epoch": self.epoch, "renewedAt": self.renewed_at,
                "expiresAt": self.expires_at, "driver": self.driver.to_json() if self.driver else None}

    @classmethod
    def from_json(cls, data: dict[str, Any], *, source: str) -> "LeaseState":
        if data.get("v") != LEASE_VERSION:
            raise CommitError(f"{source}: lease version {data.get('v')!r} is not supported")
        try:
            return cls(query_id=data["queryId"], epoch=int(data["epoch"]), renewed_at=float(data["renewedAt"]),
                       expires_at=float(data["expiresAt"]),
                       driver=DriverIdentity.from_json(data["driver"]) if data.get("driver") else None)
        except (KeyError, TypeError, ValueError) as exc:
            raise CommitError(f"lease {source} is damaged ({exc}); delete it if no query writes to this "
                              "output") from None

    def holds(self, *, now: float) -> bool:
        """Whether a query holds the output: not expired, and its driver not observably gone."""
        if self.query_id is None or now >= self.expires_at:
            return False
        return self.driver is None or not self.driver.is_gone()


class OutputLease:
    """``<output>/_sparklink/lease.json`` and its lock file (driver side)."""

    def __init__(self, path: str | os.PathLike[str], *, timeout: float = DEFAULT_LEASE_TIMEOUT):
        self.path = Path(path)
        self.lock_path = self.path.with_name(self.path.stem + ".lock")
        self.timeout = timeout

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        """Hold the lease's lock for one step (a renewal, a commit, a finish). Not re-entrant."""
        self.lock_path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing the descriptor releases the lock

    def read(self) -> LeaseState | None:
        data = read_json_file(self.path, what="lease")
        return None if data is None else LeaseState.from_json(data, source=str(self.path))

    def renew(self, query_id: str, *, now: float | None = None) -> int:
        """Under :meth:`exclusive`: ``query_id`` holds the output until now + timeout. Returns the
        epoch (unchanged by a renewal)."""
        now = time.time() if now is None else now
        current = self.read()
        epoch = current.epoch if current is not None else 0
        write_json_atomically(self.path, LeaseState(query_id=query_id, epoch=epoch, renewed_at=now,
                                                    expires_at=now + self.timeout, driver=current_driver()).to_json())
        return epoch

    def ensure_free(self, *, by: str, now: float | None = None,
                    session_drivers: frozenset[DriverIdentity] = frozenset(),
                    active_queries: frozenset[str] = frozenset()) -> None:
        """Under :meth:`exclusive`: raise ConcurrentWriterError, naming the holder, while a query
        holds the output. A holder that renewed from one of ``session_drivers`` (the caller's
        process, its Spark session's JVM) and is not in ``active_queries`` has stopped in the
        caller's own session: the output is free at once."""
        now = time.time() if now is None else now
        current = self.read()
        if current is None or current.query_id is None:
            return
        if current.query_id in active_queries:
            raise ConcurrentWriterError(f"streaming query {current.query_id} is running in this session and owns "
                                        f"{self.path.parent.parent}; stop it (query.stop() or let it end) before {by}")
        if current.holds(now=now) and current.driver not in session_drivers:
            raise ConcurrentWriterError(
                f"streaming query {current.query_id} owns {self.path.parent.parent}: its driver ({current.driver}) "
                f"renewed the lease at {_utc(current.renewed_at)} and holds it until {_utc(current.expires_at)} "
                f"(leaseTimeout {self.timeout:g}s). Stop that query and retry {by}; if its driver is gone for "
                "good, retry after that time")

    def fence(self, *, now: float | None = None) -> int:
        """Under :meth:`exclusive`, after :meth:`ensure_free`, before changing the committed
        state: end the lease and increase its epoch, so that a micro-batch planned before is
        refused at its commit. Returns the new epoch."""
        now = time.time() if now is None else now
        current = self.read()
        epoch = (current.epoch if current is not None else 0) + 1
        write_json_atomically(self.path, LeaseState(query_id=None, epoch=epoch, renewed_at=now, expires_at=now,
                                                    driver=current_driver()).to_json())
        return epoch


def check_fence(lease: OutputLease, epochs: list[int | None], *, batch_id: int) -> None:
    """Under :meth:`OutputLease.exclusive`, in a micro-batch's commit: refuse the batch if its
    tasks were planned under another epoch than the lease's current one."""
    current = lease.read()
    planned = {e for e in epochs if e is not None}
    if current is None or not planned or planned == {current.epoch}:
        return
    raise FencedError(
        f"micro-batch {batch_id} was planned before sparklink.files.finish published the held and carried files "
        f"of {lease.path.parent.parent} (at {_utc(current.renewed_at)}, lease epoch {current.epoch}, the batch's "
        f"{sorted(planned)}): this query's lease had expired (no micro-batch for longer than leaseTimeout, "
        f"{lease.timeout:g}s) while the query still ran. The batch is not committed; restart the query: it goes "
        "on from the finished output, nothing is lost or written twice")


def _utc(epoch_seconds: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(epoch_seconds))
