"""Shared fixtures: one local Spark session, a private PostgreSQL server, driver processes.

Everything is real: local Spark (``local[2]``), files in pytest's temporary directories, and a
PostgreSQL server started here with ``initdb`` / ``pg_ctl`` on a free loopback port.
"""

from __future__ import annotations

import os
import sys
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


@pytest.fixture(scope="session")
def postgres():
    """A private PostgreSQL server for the test run (max_prepared_transactions = 20)."""
    from sparklink.testing import postgres_bin_dir, start_postgres

    if postgres_bin_dir() is None:
        pytest.fail("PostgreSQL server binaries (initdb, pg_ctl) not found under /usr/lib/postgresql/*/bin")
    server = start_postgres()
    yield server
    server.stop()
