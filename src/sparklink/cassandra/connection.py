"""Connecting to Cassandra with the Python driver (``cassandra-driver``), wherever a connection
is opened: on the driver (checks, the write-ahead commit) and on executors (upsert writes).

:class:`ConnectionSettings` is small and picklable; its ``repr`` and every error message leave
the password out. :func:`shared_session` keeps one driver ``Session`` per process and settings:
a ``Cluster`` costs a control connection and a metadata fetch, and Spark reuses its Python
workers for many tasks and micro-batches, so they share it (closed when the process exits).
"""

from __future__ import annotations

import atexit
import ssl
import threading
from dataclasses import dataclass, field
from typing import Any

from sparklink.errors import ConfigError, SparklinkError

CONSISTENCY_LEVELS = ("ANY", "ONE", "TWO", "THREE", "QUORUM", "ALL", "LOCAL_QUORUM", "EACH_QUORUM", "LOCAL_ONE")
REDACTED = "***"


class CassandraError(SparklinkError):
    """A Cassandra operation failed; the message never holds a password."""


@dataclass(frozen=True, kw_only=True)
class TlsSettings:
    """TLS to the nodes: the driver's ``ssl_context``, built where the connection is opened (the
    PEM files must be readable there)."""

    ca_certificate: str | None = None
    certificate: str | None = None
    key: str | None = field(default=None, repr=False)
    key_password: str | None = field(default=None, repr=False)
    check_hostname: bool = True

    def __post_init__(self) -> None:
        if (self.certificate is None) != (self.key is None):
            raise ConfigError("sslKey" if self.key is None else "sslCertificate",
                              "is required with the other: a client certificate and its key go together")

    def context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=self.ca_certificate)
        context.check_hostname = self.check_hostname
        if self.certificate is not None:
            context.load_cert_chain(self.certificate, self.key, password=self.key_password)
        return context


@dataclass(frozen=True, kw_only=True)
class ConnectionSettings:
    """Where and how to connect; ``repr`` shows no password."""

    hosts: tuple[str, ...]
    port: int = 9042
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    tls: TlsSettings | None = None
    consistency_level: str = "LOCAL_QUORUM"
    local_datacenter: str | None = None
    request_timeout: float = 30.0

    def describe(self) -> str:
        user = f"{self.username}@" if self.username else ""
        return f"{user}{','.join(self.hosts)}:{self.port}{' (TLS)' if self.tls else ''}"

    def scrub(self, text: str) -> str:
        for secret in (self.password, self.tls.key_password if self.tls else None):
            if secret:
                text = text.replace(secret, REDACTED)
        return text

    def error(self, doing: str, exc: BaseException) -> CassandraError:
        """A CassandraError saying what failed, where, and why (secrets scrubbed; not chained)."""
        cause = self.scrub(f"{type(exc).__name__}: {exc}".strip())
        return CassandraError(f"Cassandra ({self.describe()}): {doing} failed: {cause}")

    def cluster(self) -> Any:
        """A new driver ``Cluster`` for these settings (the caller shuts it down)."""
        from cassandra import ConsistencyLevel
        from cassandra.auth import PlainTextAuthProvider
        from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile
        from cassandra.policies import DCAwareRoundRobinPolicy, TokenAwarePolicy

        policy = TokenAwarePolicy(DCAwareRoundRobinPolicy(local_dc=self.local_datacenter or ""))
        profile = ExecutionProfile(load_balancing_policy=policy, request_timeout=self.request_timeout,
                                   consistency_level=getattr(ConsistencyLevel, self.consistency_level))
        auth = PlainTextAuthProvider(self.username, self.password) if self.username else None
        return Cluster(list(self.hosts), port=self.port, auth_provider=auth,
                       ssl_context=self.tls.context() if self.tls else None,
                       execution_profiles={EXEC_PROFILE_DEFAULT: profile}, connect_timeout=10,
                       control_connection_timeout=10)

    def connect(self) -> Any:
        """A new ``(cluster, session)`` pair (the caller shuts the cluster down)."""
        cluster = self.cluster()
        try:
            return cluster, cluster.connect()
        except driver_errors() as exc:
            cluster.shutdown()
            raise self.error("connecting", exc) from None


def driver_errors() -> tuple[type[BaseException], ...]:
    """What the driver raises for a failed connection or request (for ``except``)."""
    from cassandra import DriverException
    from cassandra.cluster import NoHostAvailable
    from cassandra.connection import ConnectionException
    from cassandra.protocol import ErrorMessage

    return (DriverException, NoHostAvailable, ConnectionException, ErrorMessage, OSError)


_SESSIONS: dict[ConnectionSettings, tuple[Any, Any]] = {}
_LOCK = threading.Lock()


def shared_session(settings: ConnectionSettings) -> Any:
    """This process's session for ``settings`` (opened on first use, shut down at exit)."""
    with _LOCK:
        entry = _SESSIONS.get(settings)
        if entry is not None and not entry[1].is_shutdown:
            return entry[1]
        cluster, session = settings.connect()
        _SESSIONS[settings] = (cluster, session)
        return session


def forget_session(settings: ConnectionSettings) -> None:
    """Shut down this process's session for ``settings`` (after it failed in a way a new one may
    not: the next :func:`shared_session` opens another)."""
    with _LOCK:
        entry = _SESSIONS.pop(settings, None)
    if entry is not None:
        entry[0].shutdown()


@atexit.register
def _shutdown_all() -> None:
    with _LOCK:
        entries = list(_SESSIONS.values())
        _SESSIONS.clear()
    for cluster, _ in entries:
        cluster.shutdown()
