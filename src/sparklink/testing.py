"""Test and soak helpers: one Spark session configuration, and driver processes to kill.

A *job* is a function ``job(spark, **args)`` in an importable module. :class:`DriverProcess`
runs it as ``python -m sparklink.testing module:function '<json args>'`` in a session of its
own, so that SIGKILL of its process group is a crash of the whole driver: the Python driver,
its JVM and the JVM's Python workers. A restart with the same checkpoint recovers.
"""

from __future__ import annotations

import glob
import importlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparklink.faults import ENV_DRIVER_PGID, ENV_FAULT, ENV_ONCE

KILLED = -signal.SIGKILL
ENV_SPARK_CONF = "SPARKLINK_SPARK_CONF"  # JSON dict of extra Spark settings for driver jobs
# Driver processes of tests live for seconds: a JVM that only uses the C1 compiler and the
# serial collector starts about a third faster, which is most of such a process's life.
SHORT_LIVED_DRIVER_CONF = {"spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"}


def spark_session(master: str = "local[2]", app_name: str = "sparklink", extra: Mapping[str, str] | None = None):
    """A local SparkSession configured as every sparklink test and job expects (driver side)."""
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
    sparklink.register(spark)
    return spark


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
        full_env = {k: v for k, v in os.environ.items() if k not in (ENV_FAULT, ENV_ONCE)}
        full_env.update(env or {})
        full_env.setdefault("PYSPARK_PYTHON", sys.executable)
        full_env["SPARKLINK_TEST_MASTER"] = master
        if spark_conf:
            full_env[ENV_SPARK_CONF] = json.dumps(dict(spark_conf))
        python_path = [str(cwd or os.getcwd())] + [p for p in full_env.get("PYTHONPATH", "").split(os.pathsep) if p]
        full_env["PYTHONPATH"] = os.pathsep.join(python_path)
        self._log = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL  # noqa: SIM115
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
            if self._log is not subprocess.DEVNULL:
                self._log.close()
        return DriverResult(code, self.log_tail())

    def _reap_group(self) -> None:
        """Make sure nothing of the group outlives the driver (e.g. after a fault kill)."""
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def log_tail(self, size: int = 6000) -> str:
        """The last ``size`` characters of the driver's log (empty without a log file)."""
        if not self.log_path or not self.log_path.exists():
            return ""
        data = self.log_path.read_bytes()
        return data[-size:].decode("utf-8", errors="replace")


def run_driver(job: str, args: Mapping[str, Any], *, fault: str | None = None, once_marker: str | None = None,
               env: Mapping[str, str] | None = None, timeout: float = 300, **kwargs: Any) -> DriverResult:
    """Run ``job`` to its end (or until a fault kills it) and return how it ended."""
    extra = dict(env or {})
    if fault:
        extra[ENV_FAULT] = fault
    if once_marker:
        extra[ENV_ONCE] = once_marker
    return DriverProcess(job, args, env=extra, **kwargs).wait(timeout)


@dataclass
class PostgresServer:
    """A private PostgreSQL server started by :func:`start_postgres` (loopback only)."""

    host: str
    port: int
    user: str
    password: str
    dbname: str
    root: Path
    _stop_command: list[str]

    @property
    def dsn(self) -> str:
        return f"host={self.host} port={self.port} user={self.user} password={self.password} dbname={self.dbname}"

    @property
    def url(self) -> str:
        return f"postgresql://{self.user}:{self.password}@{self.host}:{self.port}/{self.dbname}"

    def connect(self, **kwargs: Any):
        import psycopg

        return psycopg.connect(self.dsn, **kwargs)

    def stop(self) -> None:
        subprocess.run(self._stop_command, capture_output=True)
        shutil.rmtree(self.root, ignore_errors=True)


def postgres_bin_dir() -> Path | None:
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), reverse=True)
    if candidates:
        return Path(candidates[0]).parent
    found = shutil.which("initdb")
    return Path(found).parent if found else None


def start_postgres(max_prepared_transactions: int = 20) -> PostgresServer:
    """Start a private PostgreSQL server with ``initdb`` + ``pg_ctl`` on a free loopback port, in
    a temporary directory (as the unprivileged user ``nobody`` when run as root)."""
    import psycopg

    bin_dir = postgres_bin_dir()
    if bin_dir is None:
        raise FileNotFoundError("PostgreSQL server binaries (initdb, pg_ctl) not found under /usr/lib/postgresql/*/bin")
    root = Path(tempfile.mkdtemp(prefix="sparklink-pg-"))
    data = root / "data"
    password = "s3cr3t-Pa55"
    (root / "pw").write_text(password)
    run_as: list[str] = []
    if os.geteuid() == 0:  # initdb refuses to run as root
        subprocess.run(["chown", "-R", "nobody", str(root)], check=True)
        run_as = ["runuser", "-u", "nobody", "--"]
    subprocess.run(run_as + [str(bin_dir / "initdb"), "-D", str(data), "-U", "sparklink", "--pwfile", str(root / "pw"),
                             "-A", "scram-sha-256", "-E", "UTF8", "--no-sync"], check=True, capture_output=True)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    options = (f"-c listen_addresses=127.0.0.1 -c port={port} -c unix_socket_directories={root} "
               f"-c max_prepared_transactions={max_prepared_transactions} -c fsync=off -c max_connections=100")
    subprocess.run(run_as + [str(bin_dir / "pg_ctl"), "-D", str(data), "-o", options, "-l", str(root / "server.log"),
                             "-w", "-t", "60", "start"], check=True, capture_output=True)
    server = PostgresServer(host="127.0.0.1", port=port, user="sparklink", password=password, dbname="postgres",
                            root=root, _stop_command=run_as + [str(bin_dir / "pg_ctl"), "-D", str(data), "-m",
                                                               "immediate", "-w", "stop"])
    deadline = time.time() + 30
    while True:
        try:
            server.connect().close()
            return server
        except psycopg.OperationalError:  # still starting
            if time.time() > deadline:
                raise
            time.sleep(0.2)


def _main(argv: list[str]) -> int:
    job_spec, args_json = argv[1], argv[2]
    os.environ[ENV_DRIVER_PGID] = str(os.getpgid(0))
    module_name, _, function_name = job_spec.partition(":")
    job = getattr(importlib.import_module(module_name), function_name)
    extra_conf = dict(SHORT_LIVED_DRIVER_CONF, **json.loads(os.environ.get(ENV_SPARK_CONF, "{}")))
    spark = spark_session(master=os.environ.get("SPARKLINK_TEST_MASTER", "local[2]"), app_name=job_spec,
                          extra=extra_conf)
    try:
        job(spark, **json.loads(args_json))
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv))
