"""A class-data archive for the test drivers' JVMs (test process side).

A test's driver process lives for seconds, and a third of that is its JVM loading and verifying
Spark's classes. Java's application class-data sharing (AppCDS, Java 13 and later) maps them from
an archive instead: one driver run with ``-XX:ArchiveClassesAtExit`` writes the archive of every
class it loaded, and later drivers start with ``-XX:SharedArchiveFile``, which
:func:`use_class_archive` puts in ``SPARK_SUBMIT_OPTS`` (Spark adds that variable to the command
of every driver JVM that ``spark-submit`` starts, PySpark's included; masters and workers are
started otherwise and do not use it). Measured here: a fresh driver's Spark session starts in
about 6.5 s instead of 9, and a short killed-and-restarted driver run takes about 8 s less.

The archive belongs to one JDK and one Spark class path (the jars' full paths, so each venv of
the machine has its own): its name carries a digest of both, and it is kept in
``~/.cache/sparklink`` (``$XDG_CACHE_HOME``) so that a venv builds it once. A JVM that cannot map
it (another JDK) says so on stderr and starts without it: the archive only ever changes how fast
a driver starts.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from sparklink.testing.spark_session import SHORT_LIVED_DRIVER_CONF, spark_session

ENV_SUBMIT_OPTS = "SPARK_SUBMIT_OPTS"


def archive_path() -> Path:
    """Where the archive of this JDK and this PySpark lives."""
    import pyspark

    java = subprocess.run(["java", "-version"], capture_output=True, text=True, check=True).stderr
    # full paths: a JVM maps an archive only on the class path it was built with, so every
    # checkout (venv) of the machine gets its own archive
    jars = sorted(str(p) for p in (Path(pyspark.__file__).parent / "jars").glob("*.jar"))
    digest = hashlib.sha256(json.dumps([java, pyspark.__version__, jars]).encode()).hexdigest()[:16]
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "sparklink"
    return cache / f"driver-classes-{digest}.jsa"


class ArchiveBuild:
    """A background process building the archive (see :func:`start_class_archive_build`)."""

    def __init__(self, path: Path):
        self.path = path
        self.building = path.with_name(f".{path.name}.{os.getpid()}.building")
        self._work = tempfile.TemporaryDirectory(prefix="sparklink-cds-")
        self.process = subprocess.Popen([sys.executable, "-m", "sparklink.testing.class_archive",
                                         str(self.path), str(self.building), self._work.name],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                        start_new_session=True)

    def cancel(self) -> None:
        """Stop an unfinished build (its process group: the Python process and its JVM)."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        self.building.unlink(missing_ok=True)
        self._work.cleanup()

    def wait(self) -> Path | None:
        """The archive's path once the build has ended; ``None`` if it failed."""
        try:
            returncode = self.process.wait(timeout=600)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            returncode = self.process.wait()
        self._work.cleanup()
        self.building.unlink(missing_ok=True)
        return self.path if returncode == 0 and self.path.is_file() else None


def start_class_archive_build(path: Path | None = None) -> ArchiveBuild | None:
    """Start building the archive in the background if this machine has none (one driver run of
    a small streaming job through the file sink, about a minute on a busy machine); ``None``
    when it exists already. The test run starts it as soon as it knows a test will start
    drivers, so that the build overlaps the tests before the first driver. ``path``: the
    archive's path when the caller has it already (:func:`archive_path` starts a JVM)."""
    path = path or archive_path()
    if path.is_file():
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    return ArchiveBuild(path)


def ensure_class_archive() -> Path | None:
    """The archive's path, built first if this machine has none; ``None`` if building it failed
    (drivers then start without it, as before). Runs in the test process."""
    path = archive_path()
    build = start_class_archive_build(path)
    return path if build is None else build.wait()


def use_class_archive(path: Path) -> None:
    """Have every driver JVM started from this process from now on map ``path`` (this process's
    own Spark session, if already running, is not affected)."""
    option = f"-XX:SharedArchiveFile={path}"
    current = os.environ.get(ENV_SUBMIT_OPTS, "")
    if option not in current:
        os.environ[ENV_SUBMIT_OPTS] = f"{current} {option}".strip()


def _build(building: str, work: str) -> int:
    """Archive-building process: run a small streaming job (sequence source -> file sink),
    stop Spark, and wait until the JVM has exited, which is when it writes the archive."""
    from pyspark import SparkContext

    from sparklink.testing.conformance.jobs import sequence_to_sink

    os.environ.pop(ENV_SUBMIT_OPTS, None)  # an older archive must not be mapped while building the new one
    options = f"{SHORT_LIVED_DRIVER_CONF['spark.driver.extraJavaOptions']} -XX:ArchiveClassesAtExit={building}"
    spark = spark_session(app_name="sparklink-class-archive", extra={"spark.driver.extraJavaOptions": options})
    sequence_to_sink(spark, fmt="sparklink.files", checkpoint=f"{work}/ck", num_splits=2, rows_per_split=50,
                     max_rows_per_trigger=50,
                     options={"path": f"{work}/out", "format": "parquet", "bucketAssigner": "basepath"})
    gateway = SparkContext._gateway
    assert gateway is not None  # the session above started it
    jvm = gateway.proc
    spark.stop()
    jvm.stdin.close()  # the gateway JVM exits when its stdin closes
    return 0 if jvm.wait(timeout=300) == 0 else 1


def _build_once(path: str, building: str, work: str) -> int:
    """Archive-building process: builds ``path`` unless another process has built it meanwhile.
    Builds of one archive take turns on a lock file beside it (the two workers of a parallel
    test run both start one), and the archive is renamed into place before the lock is released
    (atomic: a concurrent run sees no half-written archive)."""
    final = Path(path)
    with open(final.with_name(f".{final.name}.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes (or this process dies)
        if final.is_file():
            return 0
        status = _build(building, work)
        if status == 0 and Path(building).is_file():
            os.replace(building, final)
        return status


if __name__ == "__main__":
    sys.exit(_build_once(sys.argv[1], sys.argv[2], sys.argv[3]))
