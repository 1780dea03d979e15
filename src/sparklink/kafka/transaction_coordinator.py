"""Ending a prepared Kafka transaction from another process (driver side, Flink's resumed commit).

A Kafka transaction belongs to the producer session that began it: (transactional id,
producer id, epoch). Flink's KafkaCommitter commits a transaction a writer prepared by
resuming that session (it sets the producer id and epoch inside the Java client) and sending
``EndTxn``. confluent-kafka has no such call, and a new producer with the same transactional id
would abort the transaction instead (``InitProducerId`` fences the old session). So the
committer sends the two requests it needs through kafka-python's protocol and connection layer
(its message classes, version negotiation, TLS and SASL), not through a producer:

* ``FindCoordinator`` (key type transaction) to a bootstrap server, for the broker that
  coordinates the transactional id;
* ``EndTxn`` to that broker with the writer's producer id and epoch, committed or aborted.

The coordinator accepts it when the session is still current; ending the same transaction the
same way twice is answered with success. A session that was fenced (a newer producer
initialised the id) is refused: an error code, or on Tansu a closed connection.

Every connection uses the client config's security settings, with librdkafka's meaning
(:mod:`sparklink.kafka.security`).

Commits come once per micro-batch per write task, all from the driver's Python worker, so
:func:`end_transaction` keeps the connection of a client config open between calls (one per
config and process, taken out of the pool while a call uses it), and each connection
remembers the coordinator of a transactional id: a commit after the first costs the
``EndTxn`` round trip alone, where a new connection also pays the TCP (and TLS / SASL)
handshake, ``ApiVersions`` and ``FindCoordinator``. A kept connection that fails (the broker
restarted, closed an idle connection) is closed and the call made once more on a new one; a
coordinator that moved (``NOT_COORDINATOR``, ``COORDINATOR_NOT_AVAILABLE``) is looked up again.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass

import kafka.errors as kafka_errors
from kafka.net.compat import KafkaNetClient
from kafka.protocol.metadata import CoordinatorType, FindCoordinatorRequest
from kafka.protocol.producer import EndTxnRequest

from sparklink.kafka.security import ClientSecurity

CLIENT_ID = "sparklink-committer"
RETRIABLE = {15, 16, 51}  # COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR, CONCURRENT_TRANSACTIONS
COORDINATOR_MOVED = {15, 16}  # COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR: look the coordinator up again


class CoordinatorUnreachable(OSError):
    """The coordinator could not be reached or closed the connection (retry, or fenced on Tansu)."""


@dataclass(frozen=True)
class EndTxnResult:
    error_code: int

    @property
    def ok(self) -> bool:
        return self.error_code == 0

    @property
    def retriable(self) -> bool:
        return self.error_code in RETRIABLE

    @property
    def error_name(self) -> str:
        if self.error_code == 0:
            return "NONE"
        return kafka_errors.for_code(self.error_code).__name__.removesuffix("Error")


class TransactionCoordinator:
    """A connection to a cluster for ending prepared transactions (driver side); close it after use."""

    def __init__(self, client: Mapping[str, str], *, timeout: float = 30.0):
        self.timeout_ms = int(timeout * 1000)
        self._coordinators: dict[str, object] = {}  # transactional id -> its coordinator's node id
        security = ClientSecurity.from_client(client, committer=True)
        self.client = KafkaNetClient(bootstrap_servers=client["bootstrap.servers"], client_id=CLIENT_ID,
                                     request_timeout_ms=self.timeout_ms,
                                     socket_connection_setup_timeout_ms=min(self.timeout_ms, 10_000),
                                     reconnect_backoff_max_ms=1000, **security.kafka_python())
        try:
            self.client.check_version(timeout_ms=self.timeout_ms)
        except Exception as exc:  # noqa: BLE001 - any failure to bootstrap is "unreachable" to the caller
            self.client.close()
            raise CoordinatorUnreachable(f"bootstrap {client['bootstrap.servers']}: {type(exc).__name__}: "
                                         f"{exc}") from None

    def _call(self, node_id, request):
        try:
            return self.client.send_and_receive(node_id, request, timeout_ms=self.timeout_ms)
        except Exception as exc:  # noqa: BLE001 - network / closed connection / timeout: the caller decides
            raise CoordinatorUnreachable(f"{type(request).__name__} to node {node_id}: {type(exc).__name__}: "
                                         f"{exc}") from None

    def coordinator(self, transactional_id: str):
        known = self._coordinators.get(transactional_id)
        if known is not None:
            return known
        node = self.client.least_loaded_node(bootstrap_fallback=True)
        response = self._call(node, FindCoordinatorRequest(key=transactional_id,
                                                           key_type=CoordinatorType.TRANSACTION.value,
                                                           max_version=3))
        if response.error_code:
            raise CoordinatorUnreachable(f"FindCoordinator({transactional_id}): "
                                         f"{EndTxnResult(response.error_code).error_name}")
        found = self.client.cluster.add_coordinator(response, CoordinatorType.TRANSACTION, transactional_id,
                                                    synthesize_node_id=False)
        self._coordinators[transactional_id] = found
        return found

    def end(self, transactional_id: str, producer_id: int, epoch: int, *, commit: bool) -> EndTxnResult:
        """Commit (or abort) the open transaction of session (``producer_id``, ``epoch``).

        Raises :class:`CoordinatorUnreachable` when no answer came (network, or a broker that
        closes the connection on a fenced session)."""
        node = self.coordinator(transactional_id)
        try:
            response = self._call(node, EndTxnRequest(transactional_id=transactional_id, producer_id=producer_id,
                                                      producer_epoch=epoch, committed=commit))
        except CoordinatorUnreachable:
            self._coordinators.pop(transactional_id, None)
            raise
        if response.error_code in COORDINATOR_MOVED:
            self._coordinators.pop(transactional_id, None)
        return EndTxnResult(response.error_code)

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> "TransactionCoordinator":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


_kept: dict[tuple, list[TransactionCoordinator]] = {}  # (client config, timeout) -> idle connections
_kept_lock = threading.Lock()


def end_transaction(client: Mapping[str, str], transactional_id: str, producer_id: int, epoch: int, *, commit: bool,
                    timeout: float = 30.0) -> EndTxnResult:
    """One transaction ended (see :meth:`TransactionCoordinator.end`) on a kept connection of
    this client config, or a new one (see the module's docstring): a kept connection that fails
    is closed and the call made once more on a new connection, whose failure is raised."""
    key = (tuple(sorted(client.items())), timeout)
    with _kept_lock:
        idle = _kept.get(key)
        coordinator = idle.pop() if idle else None
    if coordinator is not None:
        try:
            result = coordinator.end(transactional_id, producer_id, epoch, commit=commit)
        except CoordinatorUnreachable:
            coordinator.close()  # stale (or, on Tansu, a fenced session): asked again on a new connection
        else:
            _keep(key, coordinator)
            return result
    coordinator = TransactionCoordinator(client, timeout=timeout)
    try:
        result = coordinator.end(transactional_id, producer_id, epoch, commit=commit)
    except BaseException:
        coordinator.close()
        raise
    _keep(key, coordinator)
    return result


def _keep(key: tuple, coordinator: TransactionCoordinator) -> None:
    with _kept_lock:
        _kept.setdefault(key, []).append(coordinator)


def close_kept_connections() -> None:
    """Close every kept connection (tests that restart a broker; a process that is done)."""
    with _kept_lock:
        kept = [c for idle in _kept.values() for c in idle]
        _kept.clear()
    for coordinator in kept:
        coordinator.close()
