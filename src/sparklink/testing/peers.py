"""Spark's own connectors as readers and benchmark peers: Delta Lake's Spark connector, the Iceberg
Spark runtime and S3A (test and benchmark side, never the runtime).

Each peer runs in a Spark session of its own, in a separate process (``peer_job.py``), with its
connector's jars (the pinned Maven sets ``tests/jvm/spark-delta``, ``spark-iceberg`` and
``hadoop-aws``, see :mod:`sparklink.testing.maven`) on ``spark.jars``; one process runs a list of
steps, so that several checks share one JVM.

Delta and Iceberg publish their Spark connectors per Spark minor version, and neither has a build
for Spark 4.3 yet; their newest builds fail on PySpark 4.3 (Delta 4.4.0 for Spark 4.2:
``NoSuchMethodError`` on ``LogicalRDD`` at the first read; Iceberg 1.12.0 for Spark 4.1:
``IncompatibleClassChangeError`` on ``View``). Those two peers therefore run on the newest Spark
their connector serves, in a second virtual environment holding only that PySpark (pinned below),
made once by this module under ``~/.cache/sparklink/peer-venv-<spark version>`` (or
``$SPARKLINK_PEER_VENVS``): the test tooling makes it, a user's install never does. S3A
(``hadoop-aws`` 3.5.0, PySpark 4.3's Hadoop) runs on PySpark 4.3 itself.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sparklink.testing import maven

JOB_SCRIPT = Path(__file__).with_name("peer_job.py")

# artifact set -> the PySpark its connector is built for (None: PySpark 4.3, this venv's own)
PEER_SPARK: dict[str, str | None] = {
    "spark-delta": "4.2.0",  # delta-spark_4.2_2.13 4.4.0 is built against Spark 4.2.0
    "spark-iceberg": "4.1.4",  # iceberg-spark-runtime-4.1_2.13 1.12.0: Spark 4.1 (4.1.4 its newest patch)
    "hadoop-aws": None,  # hadoop-aws 3.5.0 = PySpark 4.3's Hadoop
}


def venv_root() -> Path:
    configured = os.environ.get("SPARKLINK_PEER_VENVS")
    return Path(configured) if configured else Path.home() / ".cache" / "sparklink"


def peer_python(spark_version: str | None) -> str:
    """The Python of the environment holding PySpark ``spark_version`` (``None``: this one),
    making the environment first when it is missing (a venv and ``pip install pyspark==<v>``:
    about a minute with the wheel cached, more the first time it is downloaded). Safe to call
    from several processes at once (a file lock)."""
    if spark_version is None:
        return sys.executable
    root = venv_root() / f"peer-venv-{spark_version}"
    python = root / "bin" / "python"
    stamp = root / ".sparklink-peer"
    wanted = f"pyspark=={spark_version}\n"
    if stamp.is_file() and stamp.read_text() == wanted and python.exists():
        return str(python)
    root.parent.mkdir(parents=True, exist_ok=True)
    with open(root.parent / f".peer-venv-{spark_version}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if stamp.is_file() and stamp.read_text() == wanted and python.exists():
            return str(python)
        for command in ([sys.executable, "-m", "venv", "--clear", str(root)],
                        [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                         f"pyspark=={spark_version}"]):
            result = subprocess.run(command, capture_output=True, text=True)
            if result.returncode != 0:
                tail = "\n".join((result.stdout + result.stderr).splitlines()[-20:])
                raise RuntimeError(f"making the peer environment {root} failed ({' '.join(command)}):\n{tail}")
        stamp.write_text(wanted)
    return str(python)


def delta_conf() -> dict[str, str]:
    """Spark settings of a session with Delta's connector (path-based tables). The log replay of
    a snapshot runs in 2 partitions instead of Delta's 50 (``snapshotPartitions``): the same
    rows, read 2.5x faster on tables of a few commits on 2 cores (what is read is unchanged)."""
    return {"spark.jars": maven.spark_jars("spark-delta"),
            "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
            "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
            "spark.databricks.delta.snapshotPartitions": "2"}


def iceberg_conf(catalog: str, sqlite_file: str | os.PathLike[str], warehouse: str) -> dict[str, str]:
    """Spark settings of a session whose catalog ``catalog`` is Iceberg's JdbcCatalog over the SQLite
    file of a pyiceberg SQL catalog (``catalog.uri`` ``sqlite:///<file>``) and its warehouse:
    the same catalog rows, so the name must be pyiceberg's catalog name (sparklink's
    ``catalog.name``)."""
    prefix = f"spark.sql.catalog.{catalog}"
    return {"spark.jars": maven.spark_jars("spark-iceberg"),
            "spark.sql.extensions": "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
            prefix: "org.apache.iceberg.spark.SparkCatalog", f"{prefix}.type": "jdbc",
            f"{prefix}.uri": f"jdbc:sqlite:{sqlite_file}", f"{prefix}.warehouse": warehouse}


def s3a_conf(endpoint: str, access_key: str, secret_key: str, region: str) -> dict[str, str]:
    """Spark settings of a session reading and writing ``s3a://`` on an S3 server at ``endpoint``
    (path-style requests, plain HTTP on loopback)."""
    return {"spark.jars": maven.spark_jars("hadoop-aws"),
            "spark.hadoop.fs.s3a.endpoint": endpoint, "spark.hadoop.fs.s3a.access.key": access_key,
            "spark.hadoop.fs.s3a.secret.key": secret_key, "spark.hadoop.fs.s3a.path.style.access": "true",
            "spark.hadoop.fs.s3a.connection.ssl.enabled": "false", "spark.hadoop.fs.s3a.endpoint.region": region,
            "spark.hadoop.fs.s3a.aws.credentials.provider":
                "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"}


class PeerStepError(AssertionError):
    """A peer's step failed: carries the JVM's message and the end of the peer's log."""


@dataclass
class PeerRun:
    """What one peer process returned: each step's value, in order, the seconds the session took
    to start and each step took (``step_seconds``, the session's first), the process's whole time,
    and its log."""

    values: list[Any]
    step_seconds: list[float]
    seconds: float
    log: str = field(repr=False)


def run_peer(artifact_set: str, conf: Mapping[str, str], steps: Sequence[Mapping[str, Any]], *,
             timeout: float = 600, short_lived: bool = True, env: Mapping[str, str] | None = None) -> PeerRun:
    """Run ``steps`` (see ``peer_job.py``) in one Spark session with ``conf``, on the PySpark that
    ``artifact_set``'s connector is built for, in a process of its own; returns every step's
    value, or raises :class:`PeerStepError` naming the failed step, its error and the log's tail.
    ``short_lived``: the JVM runs with C1 only and the serial collector (tests: a third faster to
    start); benchmarks pass ``False``."""
    python = peer_python(PEER_SPARK[artifact_set])
    spark_conf = dict(conf)
    if short_lived:
        spark_conf.setdefault("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
    job = {"conf": spark_conf, "steps": [dict(step) for step in steps]}
    with tempfile.TemporaryDirectory(prefix="sparklink-peer-") as work:
        job_file, results_file, log_file = (Path(work) / name for name in ("job.json", "results.json", "peer.log"))
        job_file.write_text(json.dumps(job))
        full_env = {k: v for k, v in os.environ.items() if not k.startswith(("SPARKLINK_FAULT", "SPARK_SUBMIT"))}
        full_env.update({"PYSPARK_PYTHON": python, "PYSPARK_DRIVER_PYTHON": python, **(env or {})})
        full_env.pop("SPARK_HOME", None)  # the peer's own PySpark finds its own jars
        started = time.perf_counter()
        with open(log_file, "wb") as log:
            process = subprocess.Popen([python, str(JOB_SCRIPT), str(job_file), str(results_file)], env=full_env,
                                       stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            try:
                code = process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, 9)
                process.wait()
                raise PeerStepError(f"the {artifact_set} peer did not finish within {timeout:.0f} s; its log:\n"
                                    f"{_tail(log_file)}") from None
        seconds = time.perf_counter() - started
        results = json.loads(results_file.read_text()) if results_file.is_file() else []
        output = _tail(log_file)
    values, step_seconds = [], [results[0]["seconds"]] if results else []
    for index, result in enumerate(results[1:]):
        if not result["ok"]:
            raise PeerStepError(f"the {artifact_set} peer's step {index} ({steps[index]['op']}) failed: "
                                f"{result['error']}\n{result['trace']}\nthe end of its log:\n{output}")
        values.append(result["value"])
        step_seconds.append(result["seconds"])
    if code != 0 or len(values) != len(steps):
        raise PeerStepError(f"the {artifact_set} peer exited {code} after {len(values)} of {len(steps)} steps; "
                            f"the end of its log:\n{output}")
    return PeerRun(values, step_seconds, seconds, output)


def _tail(path: Path, size: int = 6000) -> str:
    from sparklink.testing.drivers import without_jvm_frames

    if not path.is_file():
        return ""
    return without_jvm_frames(path.read_bytes()[-400_000:].decode("utf-8", errors="replace"))[-size:]


def main() -> None:
    """``python -m sparklink.testing.peers``: make the peers' environments ahead of time."""
    for artifact_set, version in PEER_SPARK.items():
        print(f"{artifact_set}: {peer_python(version)} (PySpark {version or 'of this venv'})")


if __name__ == "__main__":
    main()
