"""Ending a prepared Kafka transaction from another process (driver side, Flink's resumed commit).

A Kafka transaction belongs to the producer session that began it: (transactional id,
producer id, epoch). Flink's KafkaCommitter commits a transaction a writer prepared by
resuming that session (it sets the producer id and epoch inside the Java client) and sending
``EndTxn``. confluent-kafka has no such call, and a new producer with the same transactional id
would abort the transaction instead (``InitProducerId`` fences the old session). So the
committer speaks the two requests it needs itself, over a plain socket:

* ``FindCoordinator`` (v1, key type 1: transaction) to the bootstrap servers, for the broker
  that coordinates the transactional id;
* ``EndTxn`` (v1) to that broker with the writer's producer id and epoch, committed or aborted.

The coordinator accepts it when the session is still current; ending the same transaction the
same way twice is answered with success. A session that was fenced (a newer producer
initialised the id) is refused: an error code, or on Tansu a closed connection.
Plaintext connections only (``security.protocol`` plaintext).
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass

API_FIND_COORDINATOR, API_END_TXN = 10, 26
KEY_TYPE_TRANSACTION = 1
CLIENT_ID = "sparklink-committer"
ERROR_NAMES = {0: "NONE", 15: "COORDINATOR_NOT_AVAILABLE", 16: "NOT_COORDINATOR", 47: "INVALID_PRODUCER_EPOCH",
               48: "INVALID_TXN_STATE", 49: "INVALID_PRODUCER_ID_MAPPING", 51: "CONCURRENT_TRANSACTIONS",
               53: "TRANSACTIONAL_ID_AUTHORIZATION_FAILED", 90: "PRODUCER_FENCED"}
RETRIABLE = {15, 16, 51}


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
        return ERROR_NAMES.get(self.error_code, f"error {self.error_code}")


def _string(value: str) -> bytes:
    data = value.encode("utf-8")
    return struct.pack(">h", len(data)) + data


def _receive(sock: socket.socket, size: int) -> bytes:
    chunks, left = [], size
    while left:
        chunk = sock.recv(left)
        if not chunk:
            raise CoordinatorUnreachable("the broker closed the connection")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _call(address: tuple[str, int], api_key: int, version: int, body: bytes, timeout: float) -> bytes:
    """One request / response exchange on a new connection (requests are rare: once per commit)."""
    header = struct.pack(">hhi", api_key, version, 1) + _string(CLIENT_ID)
    payload = header + body
    try:
        with socket.create_connection(address, timeout=timeout) as sock:
            sock.sendall(struct.pack(">i", len(payload)) + payload)
            (size,) = struct.unpack(">i", _receive(sock, 4))
            response = _receive(sock, size)
    except OSError as exc:
        raise CoordinatorUnreachable(f"{address[0]}:{address[1]}: {exc}") from None
    return response[4:]  # past the correlation id


def parse_bootstrap(servers: str) -> list[tuple[str, int]]:
    result = []
    for entry in servers.split(","):
        entry = entry.strip().rpartition("://")[2]
        host, _, port = entry.rpartition(":")
        result.append((host.strip("[]"), int(port)))
    return result


def find_coordinator(bootstrap: list[tuple[str, int]], transactional_id: str, timeout: float) -> tuple[str, int]:
    last_error: Exception | None = None
    for address in bootstrap:
        try:
            data = _call(address, API_FIND_COORDINATOR, 1, _string(transactional_id) + bytes([KEY_TYPE_TRANSACTION]),
                         timeout)
        except CoordinatorUnreachable as exc:
            last_error = exc
            continue
        _throttle, error = struct.unpack(">ih", data[:6])
        position = 6
        (message_length,) = struct.unpack(">h", data[position:position + 2])
        position += 2 + max(message_length, 0)
        _node, host_length = struct.unpack(">ih", data[position:position + 6])
        position += 6
        host = data[position:position + host_length].decode("utf-8")
        (port,) = struct.unpack(">i", data[position + host_length:position + host_length + 4])
        if error:
            last_error = CoordinatorUnreachable(f"FindCoordinator({transactional_id}) at {address}: "
                                                f"{ERROR_NAMES.get(error, error)}")
            continue
        return host, port
    raise CoordinatorUnreachable(f"no coordinator found for transaction '{transactional_id}': {last_error}")


def end_transaction(bootstrap_servers: str, transactional_id: str, producer_id: int, epoch: int, *, commit: bool,
                    timeout: float = 30.0) -> EndTxnResult:
    """Commit (or abort) the open transaction of session (``producer_id``, ``epoch``).

    Raises :class:`CoordinatorUnreachable` when no answer came (network, or a broker that
    closes the connection on a fenced session)."""
    coordinator = find_coordinator(parse_bootstrap(bootstrap_servers), transactional_id, timeout)
    body = _string(transactional_id) + struct.pack(">qh?", producer_id, epoch, commit)
    data = _call(coordinator, API_END_TXN, 1, body, timeout)
    _throttle, error = struct.unpack(">ih", data[:6])
    return EndTxnResult(error)
