"""Arming the runtime's named fault points from the environment (test harness side).

The runtime calls :func:`sparklink.faults.fault_point` at each step of its commit protocols;
with ``SPARKLINK_FAULT`` set, that hook calls :func:`fire` here, in whichever process reached
the point (the driver's Python, a Python worker of the driver's JVM, or an executor task).

``SPARKLINK_FAULT`` holds ``<point>[:<action>][@<batch>]``; several may be separated by
commas (``@<batch>`` limits that entry to one micro-batch, so that one driver can fail tasks at
different points in different batches). Actions:

* ``kill`` (default): SIGKILL the whole process group of the driver. Spark's Python
  workers, the JVM and the driver script share one group when the driver was started in a
  session of its own (as :class:`sparklink.testing.DriverProcess` does), so this is a crash of
  the driver.
* ``raise``: raise :class:`~sparklink.errors.FaultInjected`; in a task this is a task
  failure that Spark retries; in a test that drives a sink directly it is a simulated crash.

``SPARKLINK_FAULT_ONCE`` names a marker file: the fault fires only if the file does not
exist yet, and creates it first, so a restarted driver runs through the same point.
``SPARKLINK_FAULT_ATTEMPT`` limits executor faults to one task attempt number (``raise`` on
attempt 0 only, for instance). ``SPARKLINK_FAULT_BATCH`` limits faults to one batch id.
"""

from __future__ import annotations

import os
import signal

from sparklink.errors import FaultInjected
from sparklink.faults import ENV_FAULT

ENV_ONCE = "SPARKLINK_FAULT_ONCE"
ENV_ATTEMPT = "SPARKLINK_FAULT_ATTEMPT"
ENV_BATCH = "SPARKLINK_FAULT_BATCH"
ENV_DRIVER_PGID = "SPARKLINK_DRIVER_PGID"
FAULT_VARIABLES = (ENV_FAULT, ENV_ONCE, ENV_ATTEMPT, ENV_BATCH)


def _configured_action(point: str, batch_id: int | None) -> str | None:
    spec = os.environ.get(ENV_FAULT)
    if not spec:
        return None
    for entry in spec.split(","):
        entry, _, only_batch = entry.strip().partition("@")
        name, _, action = entry.partition(":")
        if name == point and (not only_batch or batch_id is None or int(only_batch) == batch_id):
            return action or "kill"
    return None


def _claim_once() -> bool:
    """True if this process may fire (first to create the once-marker, or no marker set)."""
    marker = os.environ.get(ENV_ONCE)
    if not marker:
        return True
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return False
    os.close(fd)
    return True


def kill_driver() -> None:
    """SIGKILL the driver's process group (``SPARKLINK_DRIVER_PGID``, set by the job runner
    before Spark starts, so the JVM and its Python workers inherit it), then this process.

    PySpark's worker daemon runs in a process group of its own, so killing our own group from
    a worker would not reach the driver; the daemon exits by itself once the JVM is gone.
    """
    group = os.environ.get(ENV_DRIVER_PGID)
    if group:
        os.killpg(int(group), signal.SIGKILL)
    else:
        os.killpg(os.getpgid(0), signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)


def fire(point: str, *, batch_id: int | None = None, attempt: int | None = None) -> None:
    """Kill or raise at ``point`` if ``SPARKLINK_FAULT`` arms it for this batch and attempt."""
    action = _configured_action(point, batch_id)
    if action is None:
        return
    wanted_batch = os.environ.get(ENV_BATCH)
    if wanted_batch is not None and batch_id is not None and int(wanted_batch) != batch_id:
        return
    wanted_attempt = os.environ.get(ENV_ATTEMPT)
    if wanted_attempt is not None and attempt is not None and int(wanted_attempt) != attempt:
        return
    if not _claim_once():
        return
    if action == "raise":
        raise FaultInjected(f"fault injected at '{point}' (batch {batch_id}, attempt {attempt})")
    if action == "kill":
        kill_driver()
    raise ValueError(f"{ENV_FAULT}: unknown action '{action}' for point '{point}' (accepted: kill, raise)")
