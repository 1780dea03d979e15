"""A private Apache Cassandra node for tests and benchmarks (test side, never the runtime).

:func:`start_cassandra` runs ``org.apache.cassandra.service.CassandraDaemon`` from the pinned
artifact set ``tests/jvm/cassandra`` (resolved by ``make jvm`` through
:mod:`sparklink.testing.maven`) as one node on 127.0.0.1, with a ``cassandra.yaml`` written
here: free loopback ports for the native transport (CQL) and the storage port, every directory
(data, commit log, hints, saved caches, CDC) in a temporary directory, one token, no JMX port
(none is opened unless asked for), a small heap and the start-up waits of a multi-node ring
turned off. It returns once a CQL client connects, and :meth:`CassandraNode.stop` kills it by
its PID and removes the directory.

The JVM flags are those Cassandra 5.0's own ``conf/jvm17-server.options`` gives Java 17 (the
module exports and opens its code reaches into), plus the ``jamm`` agent it measures memory
with, as its start script adds.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sparklink.testing.ports import free_port
from sparklink.testing.readiness import wait_until_ready

ARTIFACT_SET = "cassandra"
DAEMON = "org.apache.cassandra.service.CassandraDaemon"
START_TIMEOUT = 120.0

# Cassandra 5.0's conf/jvm17-server.options (JPMS section and Netty settings)
JAVA17_FLAGS = (
    "-Djdk.attach.allowAttachSelf=true",
    "--add-exports", "java.base/jdk.internal.misc=ALL-UNNAMED",
    "--add-exports", "java.management.rmi/com.sun.jmx.remote.internal.rmi=ALL-UNNAMED",
    "--add-exports", "java.rmi/sun.rmi.registry=ALL-UNNAMED",
    "--add-exports", "java.rmi/sun.rmi.server=ALL-UNNAMED",
    "--add-exports", "java.sql/java.sql=ALL-UNNAMED",
    "--add-exports", "java.base/java.lang.ref=ALL-UNNAMED",
    "--add-exports", "jdk.unsupported/sun.misc=ALL-UNNAMED",
    "--add-exports", "jdk.compiler/com.sun.tools.javac.file=ALL-UNNAMED",
    "--add-exports", "jdk.attach/sun.tools.attach=ALL-UNNAMED",
    "--add-opens", "java.base/java.lang.module=ALL-UNNAMED",
    "--add-opens", "java.base/jdk.internal.loader=ALL-UNNAMED",
    "--add-opens", "java.base/jdk.internal.ref=ALL-UNNAMED",
    "--add-opens", "java.base/jdk.internal.reflect=ALL-UNNAMED",
    "--add-opens", "java.base/jdk.internal.math=ALL-UNNAMED",
    "--add-opens", "java.base/jdk.internal.module=ALL-UNNAMED",
    "--add-opens", "java.base/jdk.internal.util.jar=ALL-UNNAMED",
    "--add-opens", "jdk.management/com.sun.management.internal=ALL-UNNAMED",
    "--add-opens", "java.base/sun.nio.ch=ALL-UNNAMED",
    "--add-opens", "java.base/java.io=ALL-UNNAMED",
    "--add-opens", "java.base/java.lang.reflect=ALL-UNNAMED",
    "--add-opens", "jdk.compiler/com.sun.tools.javac=ALL-UNNAMED",
    "--add-opens", "java.base/java.lang=ALL-UNNAMED",
    "--add-opens", "java.base/java.util=ALL-UNNAMED",
    "-Dio.netty.tryReflectionSetAccessible=true",
)

# A single node on loopback needs none of a ring's waits.
FAST_START_PROPERTIES = {
    "cassandra-foreground": "yes",
    "cassandra.skip_wait_for_gossip_to_settle": "0",
    "cassandra.ring_delay_ms": "0",
    "cassandra.load_ring_state": "false",
    "cassandra.superuser_setup_delay_ms": "0",
    "cassandra.auto_bootstrap": "false",
    "cassandra.migration_task_wait_in_seconds": "0",
    "cassandra.unsafesystem": "true",  # no fsync of the system keyspaces' flushes (a throw-away node)
}

LOGBACK = """<configuration>
  <appender name="FILE" class="ch.qos.logback.core.FileAppender">
    <file>{log}</file>
    <encoder><pattern>%d{{HH:mm:ss.SSS}} %-5level [%thread] %logger{{36}} - %msg%n</pattern></encoder>
  </appender>
  <root level="INFO"><appender-ref ref="FILE"/></root>
</configuration>
"""


def tls_yaml(root: Path) -> tuple[str, Path]:
    """``client_encryption_options`` for TLS on the native port, *optional* (plain clients are
    served on the same port too), with a test CA and a server certificate for 127.0.0.1 made
    here (PEM, Cassandra's ``PEMBasedSslContextFactory``); and the CA file clients trust."""
    from sparklink.testing.kafka import make_certificates

    files = make_certificates(root / "tls")
    bundle = root / "tls" / "server-key-and-chain.pem"
    bundle.write_bytes(files.key.read_bytes() + files.cert.read_bytes())
    return f"""client_encryption_options:
  enabled: true
  optional: true
  ssl_context_factory:
    class_name: org.apache.cassandra.security.PEMBasedSslContextFactory
  keystore: {bundle}
  require_client_auth: false
""", files.ca


def cassandra_yaml(root: Path, *, native_port: int, storage_port: int, authenticator: str) -> str:
    """The node's configuration: loopback, the given ports, directories under ``root``."""
    directories = {name: root / name for name in ("data", "commitlog", "hints", "saved_caches", "cdc_raw")}
    for path in directories.values():
        path.mkdir(parents=True, exist_ok=True)
    return f"""cluster_name: sparklink-test
num_tokens: 1
initial_token: 0
partitioner: org.apache.cassandra.dht.Murmur3Partitioner
endpoint_snitch: SimpleSnitch
seed_provider:
  - class_name: org.apache.cassandra.locator.SimpleSeedProvider
    parameters:
      - seeds: "127.0.0.1:{storage_port}"
listen_address: 127.0.0.1
rpc_address: 127.0.0.1
storage_port: {storage_port}
native_transport_port: {native_port}
start_native_transport: true
data_file_directories:
  - {directories['data']}
commitlog_directory: {directories['commitlog']}
hints_directory: {directories['hints']}
saved_caches_directory: {directories['saved_caches']}
cdc_raw_directory: {directories['cdc_raw']}
commitlog_sync: periodic
commitlog_sync_period: 10000ms
commitlog_segment_size: 8MiB
authenticator: {authenticator}
authorizer: AllowAllAuthorizer
auto_snapshot: false
snapshot_before_compaction: false
incremental_backups: false
dynamic_snitch: false
concurrent_reads: 8
concurrent_writes: 8
concurrent_counter_writes: 4
concurrent_compactors: 1
memtable_heap_space: 128MiB
memtable_offheap_space: 128MiB
key_cache_size: 8MiB
counter_cache_size: 0MiB
prepared_statements_cache_size: 8MiB
batch_size_warn_threshold: 64KiB
batch_size_fail_threshold: 640KiB
write_request_timeout: 10000ms
read_request_timeout: 10000ms
range_request_timeout: 20000ms
request_timeout: 20000ms
"""


@dataclass
class CassandraNode:
    """A private Cassandra node started by :func:`start_cassandra` (loopback only)."""

    host: str
    port: int
    storage_port: int
    root: Path
    process: subprocess.Popen = field(repr=False)
    username: str | None = None
    password: str | None = None
    tls_ca: Path | None = None  # the CA certificate of the node's TLS (None: no TLS)

    @property
    def log_path(self) -> Path:
        return self.root / "system.log"

    def log_tail(self, lines: int = 40) -> str:
        text = ""
        for path in (self.log_path, self.root / "stdout.log"):
            if path.exists():
                text += "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) + "\n"
        return text

    def options(self) -> dict[str, str]:
        """The ``sparklink.cassandra`` options that reach this node."""
        options = {"hosts": self.host, "port": str(self.port)}
        if self.username:
            options.update(username=self.username, password=self.password or "")
        return options

    def cluster(self, **kwargs: Any):
        """A ``cassandra.cluster.Cluster`` of the Python driver for this node (caller shuts it down)."""
        from cassandra.auth import PlainTextAuthProvider
        from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile
        from cassandra.policies import WhiteListRoundRobinPolicy

        auth = PlainTextAuthProvider(self.username, self.password) if self.username else None
        profile = ExecutionProfile(load_balancing_policy=WhiteListRoundRobinPolicy([self.host]), request_timeout=30)
        return Cluster([self.host], port=self.port, auth_provider=auth, protocol_version=5,
                       execution_profiles={EXEC_PROFILE_DEFAULT: profile}, **kwargs)

    def execute(self, *statements: str) -> list[list[Any]]:
        """Run CQL statements on a new connection; the rows of each."""
        cluster = self.cluster()
        try:
            session = cluster.connect()
            return [list(session.execute(statement)) for statement in statements]
        finally:
            cluster.shutdown()

    def stop(self) -> None:
        """SIGKILL the node by its PID (its data is thrown away with the directory)."""
        if self.process.poll() is None:
            try:
                os.kill(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.process.wait(timeout=30)
        shutil.rmtree(self.root, ignore_errors=True)


def _cql_answers(host: str, port: int, username: str | None, password: str | None) -> bool:
    from cassandra.auth import PlainTextAuthProvider
    from cassandra.cluster import Cluster, NoHostAvailable

    auth = PlainTextAuthProvider(username, password) if username else None
    cluster = Cluster([host], port=port, auth_provider=auth, protocol_version=5, connect_timeout=2,
                      control_connection_timeout=2)
    try:
        cluster.connect().execute("SELECT release_version FROM system.local")
        return True
    except (NoHostAvailable, OSError):
        return False
    finally:
        cluster.shutdown()


def java_command(root: Path, classpath: str, jamm: Path | None, *, heap: str, c1_only: bool) -> list[str]:
    properties = dict(FAST_START_PROPERTIES,
                      **{"cassandra.config": (root / "cassandra.yaml").as_uri(),
                         "cassandra.storagedir": str(root),
                         "cassandra.logdir": str(root),
                         "logback.configurationFile": str(root / "logback.xml")})
    command = ["java", f"-Xms{heap}", f"-Xmx{heap}", "-Xss512k", "-XX:+UseSerialGC", *JAVA17_FLAGS]
    if c1_only:  # starts in half the time; a benchmark wants the optimising compiler
        command.append("-XX:TieredStopAtLevel=1")
    if jamm is not None:
        command.append(f"-javaagent:{jamm}")
    command += [f"-D{key}={value}" for key, value in properties.items()]
    command += ["-cp", classpath, DAEMON]
    return command


def start_cassandra(*, heap: str = "768m", authenticator: str = "AllowAllAuthenticator", c1_only: bool = True,
                    tls: bool = False, timeout: float = START_TIMEOUT) -> CassandraNode:
    """Start one node on free loopback ports and return once CQL answers (the cause, with the
    end of the node's log, if it does not within ``timeout`` seconds).

    ``authenticator="PasswordAuthenticator"`` makes the node ask for credentials (the default
    superuser ``cassandra`` / ``cassandra``); ``tls`` serves TLS on the native port as well as
    plain connections (:func:`tls_yaml`; the CA is ``node.tls_ca``); ``c1_only`` runs the JVM without its optimising
    compiler (tests: a start in about half the time; benchmarks pass False)."""
    from sparklink.testing import maven

    jars = maven.jars(ARTIFACT_SET)
    jamm = next((jar for jar in jars if jar.name.startswith("jamm-")), None)
    classpath = os.pathsep.join(str(jar) for jar in jars)
    root = Path(tempfile.mkdtemp(prefix="sparklink-cassandra-"))
    native_port, storage_port = free_port(), free_port()
    while storage_port == native_port:
        storage_port = free_port()
    config = cassandra_yaml(root, native_port=native_port, storage_port=storage_port, authenticator=authenticator)
    tls_ca = None
    if tls:
        tls_config, tls_ca = tls_yaml(root)
        config += tls_config
    (root / "cassandra.yaml").write_text(config)
    (root / "logback.xml").write_text(LOGBACK.format(log=root / "system.log"))
    with open(root / "stdout.log", "wb") as out:
        process = subprocess.Popen(java_command(root, classpath, jamm, heap=heap, c1_only=c1_only), stdout=out,
                                   stderr=subprocess.STDOUT, cwd=root, start_new_session=True)
    username, password = ("cassandra", "cassandra") if authenticator == "PasswordAuthenticator" else (None, None)
    node = CassandraNode(host="127.0.0.1", port=native_port, storage_port=storage_port, root=root, process=process,
                         username=username, password=password, tls_ca=tls_ca)
    wait_until_ready("the Cassandra node (CQL)",
                     lambda: _port_open(native_port) and _cql_answers(node.host, native_port, username, password),
                     timeout=timeout, process=process, log_tail=node.log_tail, stop=node.stop, interval=0.25)
    return node


def _port_open(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0
