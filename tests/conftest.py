"""Shared fixtures: one local Spark session, a private PostgreSQL server, driver processes.

Everything is real: local Spark (``local[2]``), files in pytest's temporary directories, and a
PostgreSQL server started here with ``initdb`` / ``pg_ctl`` on a free loopback port.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable


@pytest.fixture(scope="session")
def spark():
    """The one SparkSession of the test run (local[2], UI off, 2 shuffle partitions)."""
    from sparklink.testing import spark_session

    session = spark_session(app_name="sparklink-tests")
    yield session
    session.stop()


@pytest.fixture
def driver(tmp_path):
    """Start jobs in driver processes that a test may SIGKILL: ``driver.run(job, args, fault=...)``."""
    from sparklink.testing import DriverProcess, run_driver

    class _Driver:
        log = tmp_path / "driver.log"

        def run(self, job: str, args: dict, **kwargs):
            kwargs.setdefault("log_path", self.log)
            kwargs.setdefault("cwd", REPO_ROOT)
            return run_driver(job, args, **kwargs)

        def start(self, job: str, args: dict, **kwargs) -> DriverProcess:
            kwargs.setdefault("log_path", self.log)
            kwargs.setdefault("cwd", REPO_ROOT)
            return DriverProcess(job, args, **kwargs)

    return _Driver()


# --------------------------------------------------------------------------- PostgreSQL


def _postgres_bin() -> Path | None:
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), reverse=True)
    if candidates:
        return Path(candidates[0]).parent
    found = shutil.which("initdb")
    return Path(found).parent if found else None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class PostgresServer:
    host: str
    port: int
    user: str
    password: str
    dbname: str

    @property
    def dsn(self) -> str:
        return f"host={self.host} port={self.port} user={self.user} password={self.password} dbname={self.dbname}"

    @property
    def url(self) -> str:
        return f"postgresql://{self.user}:{self.password}@{self.host}:{self.port}/{self.dbname}"

    def connect(self, **kwargs):
        import psycopg

        return psycopg.connect(self.dsn, **kwargs)


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    """A private PostgreSQL server for the test run (max_prepared_transactions = 20)."""
    bin_dir = _postgres_bin()
    if bin_dir is None:
        pytest.fail("PostgreSQL server binaries (initdb, pg_ctl) not found under /usr/lib/postgresql/*/bin")
    root = Path(tempfile.mkdtemp(prefix="sparklink-pg-"))
    data = root / "data"
    password = "s3cr3t-Pa55"
    pwfile = root / "pw"
    pwfile.write_text(password)
    run_as: list[str] = []
    if os.geteuid() == 0:  # initdb refuses to run as root: use an unprivileged account
        subprocess.run(["chown", "-R", "nobody", str(root)], check=True)
        run_as = ["runuser", "-u", "nobody", "--"]
    subprocess.run(run_as + [str(bin_dir / "initdb"), "-D", str(data), "-U", "sparklink", "--pwfile", str(pwfile),
                             "-A", "scram-sha-256", "-E", "UTF8", "--no-sync"],
                   check=True, capture_output=True)
    port = _free_port()
    options = (f"-c listen_addresses=127.0.0.1 -c port={port} -c unix_socket_directories={root} "
               f"-c max_prepared_transactions=20 -c fsync=off -c max_connections=100")
    subprocess.run(run_as + [str(bin_dir / "pg_ctl"), "-D", str(data), "-o", options, "-l", str(root / "server.log"),
                             "-w", "-t", "60", "start"], check=True, capture_output=True)
    server = PostgresServer(host="127.0.0.1", port=port, user="sparklink", password=password, dbname="postgres")
    import psycopg

    deadline = time.time() + 30
    while True:
        try:
            server.connect().close()
            break
        except psycopg.OperationalError:  # the server is still starting
            if time.time() > deadline:
                raise
            time.sleep(0.2)
    yield server
    subprocess.run(run_as + [str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"],
                   capture_output=True)
    shutil.rmtree(root, ignore_errors=True)
