"""Which process is a query's driver: the Spark and JVM knowledge behind the sink lease's
:class:`~sparklink.sink.lease.DriverIdentity` (driver side: the driver process, or a Python
worker of the driver's JVM).

The SDK's lease (:mod:`sparklink.sink.lease`) records a driver and tells whether a recorded one
is gone; it never asks Spark. The Spark adapter finds the driver here and hands it to the lease
(:mod:`sparklink.spark.sink_adapter` at every micro-batch, :mod:`sparklink.spark.finish` and
:mod:`sparklink.spark.end_of_input` when they finish an output).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from sparklink.sink.lease import DriverIdentity, process_identity, process_stat

_ANCESTORS = 3  # a Python worker's JVM is its parent (or the daemon's parent): a few steps up at most


def _process_name(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/comm").read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return None


def current_driver() -> DriverIdentity:
    """The driver this code runs for: in a Python worker the driver's JVM started, that JVM
    (found among the worker's first ancestors); elsewhere (the driver's Python process, a
    process without Spark) this process."""
    pid, ancestor = os.getpid(), os.getppid()
    for _ in range(_ANCESTORS):
        if ancestor <= 1:
            break
        if _process_name(ancestor) == "java":
            pid = ancestor
            break
        fields = process_stat(ancestor)
        ancestor = int(fields[1]) if fields else 0
    return process_identity(pid)


def is_connect(spark: Any) -> bool:
    """Whether ``spark`` is a Spark Connect client session (it has no JVM here)."""
    return spark is not None and type(spark).__module__.startswith("pyspark.sql.connect")


def driver_of_session(spark: Any) -> DriverIdentity | None:
    """The JVM of a classic SparkSession (None for Spark Connect or without a session)."""
    if spark is None or is_connect(spark):
        return None  # a Connect client: the driver is the server's (not even probed: no JVM attribute here)
    jvm = getattr(spark, "_jvm", None)  # classic sessions only
    if jvm is None:
        return None
    return process_identity(int(jvm.java.lang.ProcessHandle.current().pid()))
