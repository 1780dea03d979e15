"""The Spark session every sparklink test, job and soak uses (driver side).

Small settings for a 2-core machine (two shuffle partitions, a 1 GiB driver, UI off): a test
configuration, not a production one.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

ENV_SPARK_CONF = "SPARKLINK_SPARK_CONF"  # JSON dict of extra Spark settings for driver jobs
# Driver processes of tests live for seconds: a JVM that only uses the C1 compiler and the
# serial collector starts about a third faster, which is most of such a process's life.
SHORT_LIVED_DRIVER_CONF = {"spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"}
# The test suite runs hundreds of tiny queries: whole-stage code generation compiles Java for each
# plan (Janino) and adaptive execution re-plans batch queries at every shuffle, and on rows by the
# hundred both cost more than they save (about 12 % of the file sink and file source modules'
# time). Test sessions and their driver jobs only (the benchmarks keep Spark's defaults, so that
# Spark's own connectors run as users run them); streaming micro-batches never use adaptive
# execution anyway, and neither setting changes what a query returns.
TEST_PLANNING_CONF = {"spark.sql.codegen.wholeStage": "false", "spark.sql.adaptive.enabled": "false"}


def spark_session(master: str = "local[2]", app_name: str = "sparklink", extra: Mapping[str, str] | None = None,
                  *, end_of_input: bool = False):
    """A local SparkSession configured as every sparklink test and job expects (driver side).
    ``end_of_input``: install the automatic end of input as ``sparklink.register`` does for
    users (off by default here: tests and their jobs look at what a query left held or carried)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    import sparklink

    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.streaming.stopGracefullyOnShutdown", "false")
        .config("spark.python.worker.reuse", "true")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
    )
    for key, value in (extra or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    # tests look at what a query left held or carried: no automatic end of input in this session
    # (the end-of-input tests install it where they test it)
    sparklink.register(spark, end_of_input=end_of_input)
    return spark


def error_text(error: BaseException) -> str:
    """Everything an error from Spark says, for a test to match: its message, the JVM stack
    trace with every ``Caused by`` (where an executor's Python traceback lands when a task
    fails), and the same for each Python ``__cause__``. Runs in the driver.

    A streaming query that fails in a task says only "Writing job failed" in ``str(error)``;
    the task's own message is in the cause chain.
    """
    parts: list[str] = []
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        parts.append(str(current))
        parts.append(str(getattr(current, "_stackTrace", "") or ""))
        current = current.__cause__ or getattr(current, "_cause", None)
    return "\n".join(part for part in parts if part)
