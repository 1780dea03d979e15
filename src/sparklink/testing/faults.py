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

``SPARKLINK_FAULT=@<path>`` arms from a file instead: a JSON object of these variables
(``{"SPARKLINK_FAULT": "writer.after_write:raise", "SPARKLINK_FAULT_ATTEMPT": "0"}``), read at
every point reached, nothing armed while the file does not exist. A long-lived Spark session
(the test suite's shared one) is started with it, since its Python workers keep the
environment they were started with; :func:`arm_file` writes and removes the file.

``SPARKLINK_FAULT_ONCE`` names a marker file: the fault fires only if the file does not
exist yet, and creates it first, so a restarted driver runs through the same point.
``SPARKLINK_FAULT_ATTEMPT`` limits executor faults to one task attempt number (``raise`` on
attempt 0 only, for instance). ``SPARKLINK_FAULT_BATCH`` limits faults to one batch id.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sparklink.errors import FaultInjected
from sparklink.faults import ENV_FAULT

ENV_ONCE = "SPARKLINK_FAULT_ONCE"
ENV_ATTEMPT = "SPARKLINK_FAULT_ATTEMPT"
ENV_BATCH = "SPARKLINK_FAULT_BATCH"
ENV_DRIVER_PGID = "SPARKLINK_DRIVER_PGID"
FAULT_VARIABLES = (ENV_FAULT, ENV_ONCE, ENV_ATTEMPT, ENV_BATCH)


def _settings() -> dict[str, str]:
    """The armed variables: from the environment, or from the file ``SPARKLINK_FAULT=@<path>`` names."""
    spec = os.environ.get(ENV_FAULT, "")
    if not spec.startswith("@"):
        return {name: os.environ[name] for name in FAULT_VARIABLES if name in os.environ}
    try:
        return json.loads(Path(spec[1:]).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}


@contextmanager
def arm_file(path: str | os.PathLike[str], fault: str, *, attempt: int | None = None,
             once_marker: str | None = None) -> Iterator[None]:
    """Arm ``fault`` for the processes started with ``SPARKLINK_FAULT=@<path>`` while the block runs."""
    settings = {ENV_FAULT: fault}
    if attempt is not None:
        settings[ENV_ATTEMPT] = str(attempt)
    if once_marker is not None:
        settings[ENV_ONCE] = once_marker
    staged = Path(f"{os.fspath(path)}.tmp")
    staged.write_text(json.dumps(settings), encoding="utf-8")
    os.replace(staged, path)
    try:
        yield
    finally:
        Path(path).unlink(missing_ok=True)


def _configured_action(settings: dict[str, str], point: str, batch_id: int | None) -> str | None:
    spec = settings.get(ENV_FAULT)
    if not spec:
        return None
    for entry in spec.split(","):
        entry, _, only_batch = entry.strip().partition("@")
        name, _, action = entry.partition(":")
        if name == point and (not only_batch or batch_id is None or int(only_batch) == batch_id):
            return action or "kill"
    return None


def _claim_once(settings: dict[str, str]) -> bool:
    """True if this process may fire (first to create the once-marker, or no marker set)."""
    marker = settings.get(ENV_ONCE)
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
    settings = _settings()
    action = _configured_action(settings, point, batch_id)
    if action is None:
        return
    wanted_batch = settings.get(ENV_BATCH)
    if wanted_batch is not None and batch_id is not None and int(wanted_batch) != batch_id:
        return
    wanted_attempt = settings.get(ENV_ATTEMPT)
    if wanted_attempt is not None and attempt is not None and int(wanted_attempt) != attempt:
        return
    if not _claim_once(settings):
        return
    if action == "raise":
        raise FaultInjected(f"fault injected at '{point}' (batch {batch_id}, attempt {attempt})")
    if action == "kill":
        kill_driver()
    raise ValueError(f"{ENV_FAULT}: unknown action '{action}' for point '{point}' (accepted: kill, raise)")
