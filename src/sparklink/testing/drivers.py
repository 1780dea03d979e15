"""Driver processes to kill: a job in a process group of its own (test process side).

A *job* is a function ``job(spark, **args)`` in an importable module. :class:`DriverProcess`
runs it as ``python -m sparklink.testing module:function '<json args>'`` in a session of its
own, so that SIGKILL of its process group is a crash of the whole driver: the Python driver,
its JVM and the JVM's Python workers. A restart with the same checkpoint recovers.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparklink.testing.faults import ENV_DRIVER_PGID, ENV_FAULT, ENV_ONCE, FAULT_VARIABLES
from sparklink.testing.spark_session import ENV_SPARK_CONF, SHORT_LIVED_DRIVER_CONF, TEST_PLANNING_CONF, spark_session

KILLED = -signal.SIGKILL
JVM_FRAME = re.compile(r"^\s+at [\w$.<>/]+\(.*\)\s*$")
JVM_ELIDED = re.compile(r"^\s+\.\.\. \d+ more\s*$")
ENV_MASTER = "SPARKLINK_TEST_MASTER"


@dataclass
class DriverResult:
    returncode: int
    output: str

    @property
    def killed(self) -> bool:
        return self.returncode == KILLED

    @property
    def ok(self) -> bool:
        return self.returncode == 0


class DriverProcess:
    """A job running in its own driver process (its own process group)."""

    def __init__(self, job: str, args: Mapping[str, Any], *, env: Mapping[str, str] | None = None,
                 log_path: str | os.PathLike[str] | None = None, master: str = "local[2]",
                 cwd: str | os.PathLike[str] | None = None, spark_conf: Mapping[str, str] | None = None,
                 python: str | None = None, command_prefix: list[str] | None = None):
        self.log_path = Path(log_path) if log_path else None
        full_env = {k: v for k, v in os.environ.items() if k not in FAULT_VARIABLES}
        full_env.update(env or {})
        full_env.setdefault("PYSPARK_PYTHON", sys.executable)
        full_env[ENV_MASTER] = master
        if spark_conf:
            full_env[ENV_SPARK_CONF] = json.dumps(dict(spark_conf))
        python_path = [str(cwd or os.getcwd())] + [p for p in full_env.get("PYTHONPATH", "").split(os.pathsep) if p]
        full_env["PYTHONPATH"] = os.pathsep.join(python_path)
        self._log = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL  # noqa: SIM115 - closed when the driver is reaped
        python = python or sys.executable
        full_env["PYSPARK_PYTHON"] = python if python != sys.executable else full_env["PYSPARK_PYTHON"]
        self.process = subprocess.Popen(
            [*(command_prefix or []), python, "-m", "sparklink.testing", job, json.dumps(dict(args))],
            env=full_env, cwd=cwd, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True,
        )

    def kill(self) -> None:
        """SIGKILL the whole driver process group (driver, JVM, Python workers)."""
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def wait(self, timeout: float) -> DriverResult:
        try:
            code = self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            self.process.wait()
            raise TimeoutError(f"driver did not finish within {timeout:.0f}s; log: {self.log_tail()}") from None
        finally:
            self._reap_group()
            if not isinstance(self._log, int):  # a file, not subprocess.DEVNULL
                self._log.close()
        return DriverResult(code, self.log_tail())

    def kill_when(self, condition: Callable[[], bool], *, what: str, timeout: float = 240,
                  jitter: float = 0.0) -> DriverResult:
        """SIGKILL the driver's process group once ``condition()`` holds (polled every 50 ms,
        e.g. "the commit log has N entries"), after a further ``jitter`` seconds (so that the kill
        lands anywhere in the next micro-batch): a kill triggered by observable progress, not by
        a timer. Fails, with the end of the driver's log, if the driver ends first or ``what``
        does not happen within ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while not condition():
            if self.process.poll() is not None:
                raise AssertionError(f"the driver ended (exit {self.process.returncode}) before {what}; "
                                     f"the end of its log:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                self.kill()
                raise AssertionError(f"no {what} within {timeout:.0f}s; the end of the driver's log:\n{self.log_tail()}")
            time.sleep(0.05)
        if jitter:
            time.sleep(jitter)
        self.kill()
        result = self.wait(timeout=60)
        assert result.killed, f"the driver was not SIGKILLed (exit {result.returncode}): {result.output}"
        return result

    def _reap_group(self) -> None:
        """Make sure nothing of the group outlives the driver (e.g. after a fault kill)."""
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def log_tail(self, size: int = 6000) -> str:
        """The last ``size`` characters of the driver's log without JVM stack frames (empty
        without a log file): what is left are the messages, every ``Caused by`` and the
        Python tracebacks, so that a failure shows its cause rather than a wall of frames."""
        if not self.log_path or not self.log_path.exists():
            return ""
        data = self.log_path.read_bytes()[-400_000:].decode("utf-8", errors="replace")
        return without_jvm_frames(data)[-size:]


def without_jvm_frames(log: str) -> str:
    """``log`` without the ``at ...`` and ``... N more`` lines of JVM stack traces."""
    kept = [line for line in log.splitlines()
            if not (JVM_FRAME.match(line) or JVM_ELIDED.match(line))]
    return "\n".join(kept)


def run_driver(job: str, args: Mapping[str, Any], *, fault: str | None = None, once_marker: str | None = None,
               env: Mapping[str, str] | None = None, timeout: float = 300, **kwargs: Any) -> DriverResult:
    """Run ``job`` to its end (or until a fault kills it) and return how it ended."""
    extra = dict(env or {})
    if fault:
        extra[ENV_FAULT] = fault
    if once_marker:
        extra[ENV_ONCE] = once_marker
    return DriverProcess(job, args, env=extra, **kwargs).wait(timeout)


def logged_batches(directory: str | os.PathLike[str]) -> int:
    """How far a sink's commit log (``<batchId>.json`` entries) has got: the highest logged
    micro-batch id plus one, 0 before the first entry. Counts progress even after old entries
    were purged."""
    ids = [int(path.stem) for path in Path(directory).glob("*.json") if path.stem.isdigit()]
    return max(ids) + 1 if ids else 0


def run_job(argv: list[str]) -> int:
    """Driver process side: ``python -m sparklink.testing module:function '<json args>'``."""
    job_spec, args_json = argv[1], argv[2]
    os.environ[ENV_DRIVER_PGID] = str(os.getpgid(0))
    module_name, _, function_name = job_spec.partition(":")
    job = getattr(importlib.import_module(module_name), function_name)
    extra_conf = {**SHORT_LIVED_DRIVER_CONF, **TEST_PLANNING_CONF, **json.loads(os.environ.get(ENV_SPARK_CONF, "{}"))}
    # a job may ask for the automatic end of input (``job.end_of_input = True``) and to end as a
    # user's script does, without spark.stop() (``job.exits_without_stop = True``)
    spark = spark_session(master=os.environ.get(ENV_MASTER, "local[2]"), app_name=job_spec,
                          extra=extra_conf, end_of_input=getattr(job, "end_of_input", False))
    if getattr(job, "exits_without_stop", False):
        job(spark, **json.loads(args_json))
        return 0
    try:
        job(spark, **json.loads(args_json))
    finally:
        spark.stop()
    return 0
