"""A private Spark Connect server for tests: the server PySpark ships, on 127.0.0.1 (test process side).

PySpark 4.3 carries the server in its own jars (``spark-connect_2.13-4.3.0.jar``). The harness
starts its JVM directly (``java -cp <pyspark>/jars/* org.apache.spark.deploy.SparkSubmit --class
org.apache.spark.sql.connect.service.SparkConnectServer spark-internal``), which is what
``sbin/start-connect-server.sh`` runs in the end, without the daemon script's PID and log
directories: the process is this harness's child, in a process group of its own, stopped by
its PID (:meth:`ConnectServer.stop`) or SIGKILLed as a whole (:meth:`ConnectServer.kill`, a crash
of the server: its driver JVM and the JVM's Python workers).

The server is the driver: its Python workers (data sources, ``foreachBatch`` functions) run
with ``PYSPARK_PYTHON`` = this venv's Python, so they import the same sparklink as the client.
``local[2]``, UI off, two shuffle partitions, a 1 GiB heap: a test configuration.

A client session (:meth:`ConnectServer.session`) is a ``pyspark.sql.connect`` session built
directly, not through ``SparkSession.builder.remote``: the test process also holds the classic
session of the ``spark`` fixture, and PySpark's builder refuses a remote session next to it
(and would switch the whole process to Connect mode). So a test that uses the client session
writes its expressions as strings (``selectExpr``, ``filter("...")``) rather than with
``pyspark.sql.functions``, whose ``Column`` objects belong to the classic session here.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sparklink.testing.ports import free_port
from sparklink.testing.readiness import wait_until_ready
from sparklink.testing.spark_session import TEST_PLANNING_CONF

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
START_TIMEOUT = 120.0  # seconds: a JVM start on a busy 2-core machine

#: The server's Spark settings (a test configuration for a 2-core machine).
SERVER_CONF = {
    "spark.master": "local[2]",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.driver.memory": "1g",
    "spark.python.worker.reuse": "true",
    "spark.sql.streaming.stopGracefullyOnShutdown": "false",
    "spark.connect.grpc.binding.address": "127.0.0.1",
    "spark.log.level": "WARN",
    **TEST_PLANNING_CONF,
}


def pyspark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


def server_command(port: int, conf: Mapping[str, str]) -> list[str]:
    """The server's JVM command: Spark's ``SparkSubmit`` running the Connect server class."""
    settings = {**SERVER_CONF, **conf, "spark.connect.grpc.binding.port": str(port)}
    command = ["java", f"-Xmx{settings['spark.driver.memory']}", "-XX:+UseSerialGC",
               "-cp", str(pyspark_home() / "jars" / "*"),
               # the options spark-submit's launcher adds for Java 17 (module access Spark needs)
               *_java_module_options(),
               "org.apache.spark.deploy.SparkSubmit", "--class", SERVER_CLASS, "--name", "sparklink-connect-tests"]
    for key, value in settings.items():
        command += ["--conf", f"{key}={value}"]
    return [*command, "spark-internal"]


def _java_module_options() -> list[str]:
    """``--add-opens`` etc. that Spark's launcher gives a driver JVM on Java 17+ (its
    ``JavaModuleOptions``): without them Spark's off-heap and Arrow code fails."""
    packages = ["java.base/java.lang", "java.base/java.lang.invoke", "java.base/java.lang.reflect", "java.base/java.io",
                "java.base/java.net", "java.base/java.nio", "java.base/java.util", "java.base/java.util.concurrent",
                "java.base/java.util.concurrent.atomic", "java.base/jdk.internal.ref", "java.base/sun.nio.ch",
                "java.base/sun.nio.cs", "java.base/sun.security.action", "java.base/sun.util.calendar"]
    return ["-XX:+IgnoreUnrecognizedVMOptions", *[f"--add-opens={p}=ALL-UNNAMED" for p in packages],
            "-Djdk.reflect.useDirectMethodHandle=false", "-Dio.netty.tryReflectionSetAccessible=true",
            "--enable-native-access=ALL-UNNAMED"]


class ConnectServer:
    """A Spark Connect server on 127.0.0.1 (see the module's docstring). ``start()`` starts it
    (again, after :meth:`kill`, on the same port and directory); ``url`` is its ``sc://`` address."""

    def __init__(self, *, port: int | None = None, conf: Mapping[str, str] | None = None,
                 env: Mapping[str, str] | None = None, python_path: list[str] | None = None):
        self.port = port or free_port()
        self.root = Path(tempfile.mkdtemp(prefix="sparklink-connect-"))
        self.conf = dict(conf or {})
        self.env = dict(env or {})
        self.python_path = list(python_path or [])
        self.process: subprocess.Popen | None = None
        self.starts = 0
        self._sessions: dict[int, Any] = {}

    @property
    def url(self) -> str:
        return f"sc://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.root / "server.log"

    def log_tail(self, size: int = 6000) -> str:
        """The end of the server's log (every start appends), without JVM stack frames."""
        from sparklink.testing.drivers import without_jvm_frames

        if not self.log_path.exists():
            return ""
        data = self.log_path.read_bytes()[-400_000:].decode("utf-8", errors="replace")
        return without_jvm_frames(data)[-size:]

    def start(self, timeout: float = START_TIMEOUT) -> "ConnectServer":
        """Start the server's JVM and wait until its port accepts connections (RuntimeError with
        the log's tail if the process ends first or the port never opens)."""
        if self.process is not None and self.process.poll() is None:
            raise RuntimeError(f"the Connect server on port {self.port} is already running (pid {self.process.pid})")
        env = {**os.environ, **self.env}
        env["PYSPARK_PYTHON"] = self.env.get("PYSPARK_PYTHON", sys.executable)  # workers import this sparklink
        env.pop("SPARK_REMOTE", None)
        env.pop("SPARK_CONNECT_MODE_ENABLED", None)
        env["SPARK_LOCAL_IP"] = "127.0.0.1"
        if self.python_path:
            env["PYTHONPATH"] = os.pathsep.join([*self.python_path, *filter(None, env.get("PYTHONPATH", "").split(
                os.pathsep))])
        work = self.root / "work"
        work.mkdir(exist_ok=True)
        with open(self.log_path, "ab") as log:
            log.write(f"--- start {self.starts + 1} on port {self.port}\n".encode())
            log.flush()
            self.process = subprocess.Popen(server_command(self.port, {"spark.local.dir": str(self.root / "tmp"),
                                                                       **self.conf}),
                                            cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, start_new_session=True)
        self.starts += 1
        wait_until_ready(f"the Connect server on port {self.port} (log {self.log_path})", self._answers,
                         timeout=timeout, process=self.process, log_tail=self.log_tail, stop=self.kill, interval=0.1)
        return self

    def _answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                return True
        except OSError:
            return False

    def session(self):
        """A Spark Connect client session on this server (one per server start, cached: after a
        :meth:`kill` and :meth:`start` the next call connects anew), with sparklink registered."""
        session = self._sessions.get(self.starts)
        if session is None:
            from pyspark.sql.connect.session import SparkSession as ConnectSession

            import sparklink

            session = ConnectSession.builder.remote(self.url).create()
            sparklink.register(session)
            self._sessions = {self.starts: session}
        return session

    def kill(self) -> None:
        """SIGKILL the server's process group (its JVM and the JVM's Python workers): a crash."""
        if self.process is None:
            return
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait()
        self._close_sessions()

    def stop(self) -> None:
        """Stop the server by its PID (SIGTERM; SIGKILL of its group after 20 s) and remove its directory."""
        self._close_sessions()
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                pass
        if self.process is not None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)  # the Python workers, if any outlived the JVM
            except ProcessLookupError:
                pass
            self.process.wait()
        shutil.rmtree(self.root, ignore_errors=True)

    def _close_sessions(self) -> None:
        for session in self._sessions.values():
            try:
                session.client.close()
            except Exception:  # noqa: BLE001 - closing a channel to a server that is gone: nothing to say
                pass
        self._sessions = {}


def start_connect_server(**kwargs: Any) -> ConnectServer:
    """A started :class:`ConnectServer` (keyword arguments as its constructor's)."""
    server = ConnectServer(**kwargs)
    try:
        return server.start()
    except BaseException:
        server.stop()
        raise
