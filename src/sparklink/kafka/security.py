"""Connection security of every Kafka client sparklink opens (driver side: validation and the
start-up check; the settings themselves travel to the executors inside the client config).

The settings are librdkafka's, given as ``kafka.<name>`` options and passed to confluent-kafka
unchanged. The committer (:mod:`sparklink.kafka.transaction_coordinator`) talks to the
transaction coordinator through kafka-python's connection layer, so this module also says what
each setting means there, with librdkafka's meaning:

==========================================  =====================================================
``security.protocol``                       ``plaintext`` (default), ``ssl``, ``sasl_plaintext``,
                                            ``sasl_ssl`` (any case)
``ssl.ca.location``                         CA certificate(s) that sign the brokers' certificates:
                                            a PEM file or a directory of them (default: the
                                            system's trust store)
``ssl.certificate.location``                the client's certificate (PEM), for brokers that
                                            authenticate clients by certificate
``ssl.key.location`` / ``ssl.key.password`` the client's private key (PEM) and its password
``ssl.endpoint.identification.algorithm``   ``https`` (default): the broker's certificate must
                                            name the host connected to; ``none``: not checked
``enable.ssl.certificate.verification``     ``true`` (default); ``false`` accepts any
                                            certificate (test set-ups only)
``sasl.mechanism`` (alias ``sasl.mechanisms``)  ``PLAIN``, ``SCRAM-SHA-256``, ``SCRAM-SHA-512``
``sasl.username`` / ``sasl.password``       the SASL credentials
==========================================  =====================================================

Other ``ssl.*`` / ``sasl.*`` settings (inline PEM, keystores, OAUTHBEARER, GSSAPI, ...) are
refused when the committer must honour them too (``semantic=exactly-once``), rather than used by
the writers and silently ignored by the committer.

Secrets (``sasl.password``, ``ssl.key.password``) appear in no message, log line or file
written by sparklink: :func:`redacted` is what error messages show of a client config.
"""

from __future__ import annotations

import logging
import os
import socket
import ssl
from collections.abc import Mapping
from dataclasses import dataclass

from sparklink.errors import ConfigError

#: The prefix of the Kafka client settings among a connector's options (as Spark's Kafka connector).
CLIENT_PREFIX = "kafka."
PROTOCOLS = ("plaintext", "ssl", "sasl_plaintext", "sasl_ssl")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
SECRET_SETTINGS = frozenset({"sasl.password", "ssl.key.password", "ssl.keystore.password",
                             "sasl.oauthbearer.client.secret", "ssl.key.pem"})
# settings the committer honours with librdkafka's meaning (besides bootstrap.servers)
SERVED = frozenset({"security.protocol", "ssl.ca.location", "ssl.certificate.location", "ssl.key.location",
                    "ssl.key.password", "ssl.endpoint.identification.algorithm",
                    "enable.ssl.certificate.verification", "sasl.mechanism", "sasl.mechanisms", "sasl.username",
                    "sasl.password"})
START_CHECK_TIMEOUT_SECONDS = 5.0


class _SecretRedactor(logging.Filter):
    """Replaces the passwords given to kafka-python in its log records (driver side). Its DEBUG
    trace of the protocol prints every request, and a PLAIN ``SaslAuthenticate`` carries the
    password in the clear; SCRAM's carries only a proof."""

    def __init__(self) -> None:
        super().__init__("kafka")
        self.secrets: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        if not self.secrets:
            return True
        message = record.getMessage()
        text = message
        for secret in self.secrets:
            text = text.replace(secret, "[redacted]")
        if text != message:
            record.msg, record.args = text, ()
        return True


_REDACTOR = _SecretRedactor()


def _redact_in_kafka_python_logs(*secrets: str | None) -> None:
    """Registers ``secrets`` with the redactor and puts it on every kafka-python logger (a
    logger's filters see only the records logged on it, not its children's)."""
    import kafka.net.compat  # noqa: F401 - kafka-python's modules, and so their loggers, exist from here on

    # the forms a secret takes in a record: as text, and inside the repr of bytes
    _REDACTOR.secrets.update(form for secret in secrets if secret
                             for form in (secret, repr(secret.encode())[2:-1]))
    for name, logger in list(logging.Logger.manager.loggerDict.items()):
        if (name == "kafka" or name.startswith("kafka.")) and isinstance(logger, logging.Logger) \
                and _REDACTOR not in logger.filters:
            logger.addFilter(_REDACTOR)


def redacted(client: Mapping[str, str]) -> dict[str, str]:
    """The client config with every secret replaced (for messages)."""
    return {k: ("[redacted]" if k in SECRET_SETTINGS else v) for k, v in client.items()}


def _option(name: str) -> str:
    return CLIENT_PREFIX + name


def _bool(client: Mapping[str, str], name: str, default: bool) -> bool:
    value = client.get(name)
    if value is None:
        return default
    if value.lower() not in ("true", "false"):
        raise ConfigError(_option(name), f"'{value}' is not a boolean", "true, false")
    return value.lower() == "true"


@dataclass(frozen=True, kw_only=True)
class ClientSecurity:
    """The security settings of one client config, parsed and checked (driver side)."""

    protocol: str
    ca_location: str | None
    certificate_location: str | None
    key_location: str | None
    key_password: str | None
    check_hostname: bool
    verify_certificate: bool
    mechanism: str | None
    username: str | None
    password: str | None

    @property
    def tls(self) -> bool:
        return self.protocol in ("ssl", "sasl_ssl")

    @property
    def sasl(self) -> bool:
        return self.protocol in ("sasl_plaintext", "sasl_ssl")

    def __repr__(self) -> str:  # never the secrets
        return (f"ClientSecurity(protocol={self.protocol!r}, ca_location={self.ca_location!r}, "
                f"mechanism={self.mechanism!r}, username={self.username!r})")

    @classmethod
    def from_client(cls, client: Mapping[str, str], *, committer: bool) -> "ClientSecurity":
        """Parse and check; ``committer``: the settings must also be served by the committer."""
        protocol = client.get("security.protocol", "plaintext").lower()
        if protocol not in PROTOCOLS:
            raise ConfigError(_option("security.protocol"), f"'{client['security.protocol']}' is not a protocol",
                              ", ".join(PROTOCOLS))
        tls, sasl = protocol in ("ssl", "sasl_ssl"), protocol in ("sasl_plaintext", "sasl_ssl")
        if committer:
            for name in client:
                if _is_security_setting(name) and name not in SERVED:
                    raise ConfigError(_option(name), "is not served by the exactly-once committer (it ends the "
                                      "writers' transactions through kafka-python, which honours only "
                                      + ", ".join(sorted(_option(s) for s in SERVED)) + ")")
        for name in ("ssl.ca.location", "ssl.certificate.location", "ssl.key.location"):
            path = client.get(name)
            if path is not None and not tls:
                raise ConfigError(_option(name), f"is set but security.protocol is '{protocol}' (no TLS)",
                                  "ssl, sasl_ssl")
            if path is not None and not os.path.exists(path):
                raise ConfigError(_option(name), f"'{path}' does not exist")
        if ("ssl.key.location" in client) != ("ssl.certificate.location" in client):
            raise ConfigError(_option("ssl.key.location"), "a client certificate needs both "
                              "kafka.ssl.certificate.location and kafka.ssl.key.location")
        algorithm = client.get("ssl.endpoint.identification.algorithm", "https").lower()
        if algorithm not in ("https", "none"):
            raise ConfigError(_option("ssl.endpoint.identification.algorithm"), f"'{algorithm}' is not served",
                              "https, none")
        mechanism = client.get("sasl.mechanism", client.get("sasl.mechanisms"))
        username, password = client.get("sasl.username"), client.get("sasl.password")
        if sasl:
            mechanism = (mechanism or "GSSAPI").upper()  # librdkafka's default mechanism
            if committer and mechanism not in MECHANISMS:
                raise ConfigError(_option("sasl.mechanism"), f"'{mechanism}' is not served by the exactly-once "
                                  "committer", ", ".join(MECHANISMS))
            if mechanism in MECHANISMS and (not username or password is None):
                raise ConfigError(_option("sasl.username"), f"sasl.mechanism {mechanism} needs "
                                  "kafka.sasl.username and kafka.sasl.password")
        elif mechanism is not None or username is not None or password is not None:
            raise ConfigError(_option("sasl.mechanism" if mechanism else "sasl.username"),
                              f"is set but security.protocol is '{protocol}' (no SASL)", "sasl_plaintext, sasl_ssl")
        return cls(protocol=protocol, ca_location=client.get("ssl.ca.location"),
                   certificate_location=client.get("ssl.certificate.location"),
                   key_location=client.get("ssl.key.location"), key_password=client.get("ssl.key.password"),
                   check_hostname=algorithm == "https",
                   verify_certificate=_bool(client, "enable.ssl.certificate.verification", True),
                   mechanism=mechanism if sasl else None, username=username if sasl else None,
                   password=password if sasl else None)

    def ssl_context(self) -> ssl.SSLContext | None:
        """librdkafka's TLS settings as a Python SSL context (None without TLS)."""
        if not self.tls:
            return None
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # verifies certificate and host name
        if self.ca_location is None:
            context.load_default_certs(ssl.Purpose.SERVER_AUTH)  # as librdkafka: the system's store
        else:  # as librdkafka: only these CAs
            try:
                if os.path.isdir(self.ca_location):
                    context.load_verify_locations(capath=self.ca_location)
                else:
                    context.load_verify_locations(cafile=self.ca_location)
            except (ssl.SSLError, OSError) as exc:
                raise ConfigError(_option("ssl.ca.location"), f"'{self.ca_location}' holds no usable CA "
                                  f"certificate: {exc}") from None
        if self.certificate_location is not None:
            try:
                context.load_cert_chain(self.certificate_location, self.key_location, password=self.key_password)
            except (ssl.SSLError, OSError) as exc:
                raise ConfigError(_option("ssl.key.location"), f"the client certificate "
                                  f"'{self.certificate_location}' and key '{self.key_location}' cannot be loaded "
                                  f"(wrong kafka.ssl.key.password?): {type(exc).__name__}") from None
        context.check_hostname = self.check_hostname and self.verify_certificate
        if not self.verify_certificate:
            context.verify_mode = ssl.CERT_NONE
        return context

    def kafka_python(self) -> dict:
        """The settings as kafka-python's connection layer takes them."""
        settings: dict = {"security_protocol": self.protocol.upper()}
        if self.tls:
            settings.update(ssl_context=self.ssl_context(), ssl_check_hostname=self.check_hostname)
        if self.sasl:
            settings.update(sasl_mechanism=self.mechanism, sasl_plain_username=self.username,
                            sasl_plain_password=self.password)
            _redact_in_kafka_python_logs(self.password)
        return settings


def parse_bootstrap(servers: str) -> list[tuple[str, int]]:
    result = []
    for entry in servers.split(","):
        entry = entry.strip().rpartition("://")[2]
        host, _, port = entry.rpartition(":")
        result.append((host.strip("[]"), int(port)))
    return result


def _first_answer(address: tuple[str, int], security: ClientSecurity, timeout: float) -> str | None:
    """Open one connection as the clients will and send ApiVersions; a one-line problem or None."""
    from kafka.net.compat import KafkaNetClient  # imported where used: driver side only
    host, port = address
    try:
        with socket.create_connection(address, timeout=timeout):
            pass
    except OSError:
        return _UNREACHABLE  # the clients retry and report it (a broker may be restarting): not a setting
    if security.tls:
        try:
            with socket.create_connection(address, timeout=timeout) as raw:
                context = security.ssl_context()
                assert context is not None  # security.tls: a context is made
                with context.wrap_socket(raw, server_hostname=host):
                    pass
        except ssl.SSLCertVerificationError as exc:
            if "hostname" in str(exc.verify_message).lower() or "IP address mismatch" in str(exc.verify_message):
                return (f"kafka.ssl.endpoint.identification.algorithm: the certificate of {host}:{port} does not "
                        f"name '{host}' ({exc.verify_message})")
            return (f"kafka.ssl.ca.location: the certificate of {host}:{port} is not signed by a CA of "
                    f"{security.ca_location or 'the system trust store'} ({exc.verify_message})")
        except (TimeoutError, socket.timeout):
            return (f"kafka.security.protocol: {security.protocol} but {host}:{port} did not answer the TLS handshake "
                    f"within {timeout:.0f}s (a plaintext listener?)")
        except (ssl.SSLError, OSError) as exc:
            return (f"kafka.security.protocol: {security.protocol} but the TLS handshake with {host}:{port} failed "
                    f"({type(exc).__name__}: {exc}; a plaintext listener?)")
    failures = _ConnectionFailures()
    watched = logging.getLogger("kafka.net.connection")
    watched.addHandler(failures)
    client = KafkaNetClient(bootstrap_servers=f"{host}:{port}", client_id="sparklink-check",
                            request_timeout_ms=int(timeout * 1000),
                            socket_connection_setup_timeout_ms=int(timeout * 1000),
                            reconnect_backoff_max_ms=1000, **security.kafka_python())
    try:
        # one connection to the bootstrap server, initialised as every client's: ApiVersions, then
        # the SASL handshake and authentication; a failure ends it at once (its reason is logged)
        client.await_ready(client.least_loaded_node(bootstrap_fallback=True), timeout_ms=int(timeout * 1000))
    except Exception as exc:  # noqa: BLE001 - kafka-python raises many kinds; each becomes the one-line message
        reason = (failures.first or f"{type(exc).__name__}: {exc}").splitlines()[0]
        if security.sasl and "UnsupportedSaslMechanism" in reason:
            return (f"kafka.sasl.mechanism: {host}:{port} does not serve {security.mechanism} on this listener "
                    f"({reason})")
        if security.sasl:
            # Apache Kafka closes the connection on a refused mechanism as on a wrong password,
            # before kafka-python reads its answer: the two are told apart only where a broker answers
            return (f"kafka.sasl.password: {security.mechanism} authentication of user '{security.username}' at "
                    f"{host}:{port} did not succeed ({reason}; a wrong password or user, a kafka.sasl.mechanism "
                    "this listener does not serve, or a listener without SASL)")
        if not security.tls:
            return (f"kafka.security.protocol: {security.protocol} but {host}:{port} gave no Kafka answer "
                    f"({reason}; a TLS listener?)")
        return f"kafka.bootstrap.servers: {host}:{port} gave no Kafka answer ({reason})"
    finally:
        watched.removeHandler(failures)
        client.close()
    return None


class _ConnectionFailures(logging.Handler):
    """Keeps why kafka-python's connection failed (its exception only says "not ready")."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.first: str | None = None

    def emit(self, record: logging.LogRecord) -> None:
        args = record.args
        if self.first is None and "Connection lost" in str(record.msg) and isinstance(args, tuple) and len(args) >= 2:
            exc = args[1]
            self.first = f"{type(exc).__name__}: {exc}" if isinstance(exc, BaseException) else str(exc)


_UNREACHABLE = "unreachable"
_verified: set[tuple[str, frozenset]] = set()  # (servers, settings) that passed, in this process


def _checked(servers: str, items: frozenset) -> None:
    if (servers, items) in _verified:
        return
    security = ClientSecurity.from_client(dict(items), committer=False)
    problems = []
    for address in parse_bootstrap(servers):
        problem = _first_answer(address, security, START_CHECK_TIMEOUT_SECONDS)
        if problem is None:
            _verified.add((servers, items))
            return
        if problem is not _UNREACHABLE:
            problems.append(problem)
    if not problems:
        return  # no server reachable now: nothing learnt about the settings; checked again next time
    setting, _, detail = problems[0].partition(": ")
    raise ConfigError(setting, detail + (f" (and {len(problems) - 1} more bootstrap servers failed)"
                                         if len(problems) > 1 else ""))


def replicable(client: Mapping[str, str]) -> bool:
    """Whether the start check can connect exactly as librdkafka will: only served settings."""
    if any(_is_security_setting(name) and name not in SERVED for name in client):
        return False
    mechanism = client.get("sasl.mechanism", client.get("sasl.mechanisms"))
    return mechanism is None or mechanism.upper() in MECHANISMS or "sasl" not in client.get(
        "security.protocol", "plaintext").lower()


def _is_security_setting(name: str) -> bool:
    lowered = name.lower()
    return lowered.startswith(("ssl.", "sasl.", "ssl_")) or "ssl" in lowered.split(".")


def check_connection(client: Mapping[str, str]) -> None:
    """At start (driver): connect to the bootstrap servers as the clients will, within
    ``START_CHECK_TIMEOUT_SECONDS``, and turn a wrong CA, a wrong password or a protocol mismatch
    into a one-line :class:`ConfigError` naming the setting (librdkafka would retry until its
    request timeout and report a transport failure). Done once per process and config; skipped
    where the config has settings the check cannot apply (keystores, inline PEM, GSSAPI,
    OAUTHBEARER...: only the source and at-least-once accept those)."""
    if "bootstrap.servers" not in client:
        return  # refused by the option validation, naming the option
    if not replicable(client):
        return  # the source or an at-least-once sink with settings only librdkafka serves: it reports
    relevant = frozenset((k, v) for k, v in client.items() if k in SERVED)
    _checked(client["bootstrap.servers"], relevant)
