"""Fixtures of the Kafka tests: one Tansu broker for the whole run (started on first use)."""

from __future__ import annotations

import itertools

import pytest

from sparklink.testing.kafka import create_topic, start_tansu

_names = itertools.count()


@pytest.fixture(scope="session")
def kafka():
    """A private Tansu broker on loopback (in memory), stopped by PID at the end of the run."""
    broker = start_tansu()
    yield broker
    broker.stop()


@pytest.fixture
def new_topic(kafka, request):
    """``new_topic(partitions)`` creates a topic with a name unique to the test and returns it."""

    def create(partitions: int = 1, prefix: str = "t") -> str:
        name = f"{prefix}-{request.node.name[:40]}-{next(_names)}".replace("[", "-").replace("]", "")
        create_topic(kafka.bootstrap_servers, name, partitions)
        return name

    return create


@pytest.fixture(scope="session")
def kafka_tls():
    """A second Tansu broker, reached only through a TLS-terminating proxy on loopback (its
    ``client`` / ``options`` carry security.protocol=ssl and the test CA)."""
    broker = start_tansu(tls=True)
    yield broker
    broker.stop()


@pytest.fixture
def new_tls_topic(kafka_tls, request):
    """``new_tls_topic(partitions)``: a topic on the TLS broker, named after the test."""

    def create(partitions: int = 1, prefix: str = "t") -> str:
        name = f"{prefix}-{request.node.name[:40]}-{next(_names)}".replace("[", "-").replace("]", "")
        create_topic(kafka_tls.client, name, partitions)
        return name

    return create
