"""A Spark standalone cluster on loopback, from the pyspark distribution (driver machine).

Used by the cluster tests and by anyone who wants to try a job on a real cluster topology on
one machine: a master and N workers, each a separate JVM (``spark-class ...Master`` /
``...Worker``) in a process group of its own so that a worker can be SIGKILLed with its
executors. The zip that ships sparklink to executors is the runtime's
:func:`sparklink.spark.py_files.build_py_files_zip`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import pyspark

from sparklink.testing.ports import free_port
from sparklink.testing.readiness import wait_until_ready

SPARK_HOME = Path(pyspark.__file__).parent


@dataclass
class StandaloneCluster:
    """A master and ``workers`` workers on 127.0.0.1; use as a context manager."""

    work_dir: Path
    workers: int = 2
    cores_per_worker: int = 1
    memory_per_worker: str = "1g"
    worker_env: dict[str, str] = field(default_factory=dict)
    master_port: int = field(default_factory=free_port)
    master_ui_port: int = field(default_factory=free_port)
    _master: subprocess.Popen | None = field(default=None, init=False, repr=False)
    _workers: list[subprocess.Popen] = field(default_factory=list, init=False, repr=False)

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.master_port}"

    def _spawn(self, name: str, args: list[str], env: dict[str, str]) -> subprocess.Popen:
        log = open(self.work_dir / f"{name}.log", "ab")  # noqa: SIM115 - closed by the child's exit
        full_env = dict(os.environ, SPARK_HOME=str(SPARK_HOME), SPARK_LOCAL_IP="127.0.0.1",
                        SPARK_NO_DAEMONIZE="1", **env)
        return subprocess.Popen([str(SPARK_HOME / "bin" / "spark-class"), *args], env=full_env, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)

    def start(self) -> "StandaloneCluster":
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self._master = self._spawn("master", ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                                              "--port", str(self.master_port), "--webui-port",
                                              str(self.master_ui_port)], {})
        self._wait_for(lambda status: True, "the master to start")
        for index in range(self.workers):
            self.add_worker(index)
        self._wait_for(lambda status: status.get("aliveworkers", 0) >= self.workers,
                       f"{self.workers} workers to register")
        return self

    def add_worker(self, index: int) -> None:
        worker_dir = self.work_dir / f"worker-{index}"
        worker_dir.mkdir(exist_ok=True)
        self._workers.append(self._spawn_worker(index))

    def _spawn_worker(self, index: int) -> subprocess.Popen:
        return self._spawn(
            f"worker-{index}",
            ["org.apache.spark.deploy.worker.Worker", self.url, "--host", "127.0.0.1", "--cores",
             str(self.cores_per_worker), "--memory", self.memory_per_worker, "--webui-port", "0",
             "--work-dir", str(self.work_dir / f"worker-{index}")],
            self.worker_env,
        )

    def restart_worker(self, index: int) -> None:
        """Start worker ``index`` again after :meth:`kill_worker` and wait until the master
        counts every worker alive (a cluster can then serve another test)."""
        self._workers[index] = self._spawn_worker(index)
        self._wait_for(lambda status: status.get("aliveworkers", 0) >= self.workers,
                       f"worker {index} to register again")

    def status(self) -> dict:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.master_ui_port}/json/", timeout=5) as response:
            return json.load(response)

    def _wait_for(self, condition, what: str, timeout: float = 90) -> None:
        wait_until_ready(f"{what} (logs in {self.work_dir})", lambda: condition(self.status()), timeout=timeout,
                         retry_on=(OSError,), interval=0.5)  # OSError: the master's web UI is not up yet

    def kill_worker(self, index: int) -> None:
        """SIGKILL worker ``index`` together with its executors and their Python workers."""
        process = self._workers[index]
        for pid in [process.pid, *self._executor_pids(index)]:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                continue
        process.wait(timeout=30)

    def _executor_pids(self, index: int) -> list[int]:
        """Executors started by a worker run in their own process groups: find them by work dir."""
        marker = str(self.work_dir / f"worker-{index}")
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                cmdline = (entry / "cmdline").read_bytes().decode(errors="replace")
            except OSError:
                continue
            if "CoarseGrainedExecutorBackend" in cmdline and marker in cmdline:
                found.append(int(entry.name))
        return found

    def stop(self) -> None:
        for process in [*self._workers, self._master]:
            if process is None:
                continue
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            process.wait(timeout=30)
        for index in range(len(self._workers)):
            for pid in self._executor_pids(index):
                try:
                    os.killpg(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass

    def __enter__(self) -> "StandaloneCluster":
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()
