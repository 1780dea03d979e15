"""The harness's pytest fixtures (a pytest plugin): ``spark``, ``driver`` and ``postgres``.

Load it from a ``conftest.py`` with ``pytest_plugins = ["sparklink.testing.fixtures"]`` (the
project's own tests do the same). Everything is real: local Spark, files in pytest's temporary
directories, and a PostgreSQL server started with ``initdb`` / ``pg_ctl`` on a free loopback port.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from sparklink.testing.drivers import DriverProcess, DriverResult, run_driver
from sparklink.testing.postgres import postgres_bin_dir, start_postgres
from sparklink.testing.spark_session import spark_session

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


@pytest.fixture(scope="session")
def spark():
    """The one SparkSession of the test run (local[2], UI off, 2 shuffle partitions)."""
    session = spark_session(app_name="sparklink-tests")
    yield session
    session.stop()


class Drivers:
    """Start jobs in driver processes that a test may SIGKILL. Jobs are imported by module
    name from ``cwd`` (the pytest root directory); every run of one test logs to one file."""

    def __init__(self, log: Path, cwd: Path):
        self.log, self.cwd = log, cwd

    def run(self, job: str, args: dict, **kwargs) -> DriverResult:
        """Run ``job`` to its end (or until a fault kills it): ``driver.run(job, args, fault=...)``."""
        kwargs.setdefault("log_path", self.log)
        kwargs.setdefault("cwd", self.cwd)
        return run_driver(job, args, **kwargs)

    def start(self, job: str, args: dict, **kwargs) -> DriverProcess:
        """Start ``job`` and return at once (the test kills or waits)."""
        kwargs.setdefault("log_path", self.log)
        kwargs.setdefault("cwd", self.cwd)
        return DriverProcess(job, args, **kwargs)


@pytest.fixture
def driver(tmp_path, request) -> Drivers:
    """``driver.run(job, args, fault=..., once_marker=..., env=..., master=...)`` / ``driver.start``."""
    return Drivers(tmp_path / "driver.log", Path(request.config.rootpath))


@pytest.fixture(scope="session")
def postgres():
    """A private PostgreSQL server for the test run (max_prepared_transactions = 20)."""
    if postgres_bin_dir() is None:
        pytest.fail("PostgreSQL server binaries (initdb, pg_ctl) not found under /usr/lib/postgresql/*/bin")
    server = start_postgres()
    yield server
    server.stop()
