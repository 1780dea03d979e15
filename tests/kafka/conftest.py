"""Fixtures of the Kafka tests: Apache Kafka's own broker (one KRaft node) for the whole run (the
``kafka`` fixture of :mod:`sparklink.testing.fixtures`, shared with the Spark Connect tests), its
TLS and SASL listeners, and Tansu where a second implementation adds coverage (docs/testing.md).
Each broker starts on first use and is stopped by its PID at the end of the run."""

from __future__ import annotations

import itertools

import pytest

from sparklink.testing.kafka import create_topic, start_tansu

_names = itertools.count()


def _topic_factory(client, request):
    def create(partitions: int = 1, prefix: str = "t") -> str:
        name = f"{prefix}-{request.node.name[:40]}-{next(_names)}".replace("[", "-").replace("]", "")
        create_topic(client, name, partitions)
        return name

    return create


@pytest.fixture
def new_topic(kafka, request):
    """``new_topic(partitions)`` creates a topic with a name unique to the test and returns it."""
    return _topic_factory(kafka.client, request)


@pytest.fixture(scope="session")
def kafka_tls(kafka):
    """The broker's TLS listener, served by the broker itself (``client`` / ``options`` carry
    security.protocol=ssl and the test CA)."""
    return kafka.endpoint("ssl")


@pytest.fixture
def new_tls_topic(kafka_tls, request):
    """``new_tls_topic(partitions)``: a topic created through the TLS listener, named after the test."""
    return _topic_factory(kafka_tls.client, request)


@pytest.fixture(scope="session")
def tansu():
    """Tansu (in memory), a second implementation of the protocol: only for the tests that say
    what it adds (docs/testing.md)."""
    broker = start_tansu()
    yield broker
    broker.stop()


@pytest.fixture
def new_tansu_topic(tansu, request):
    """``new_tansu_topic(partitions)``: a topic on Tansu, named after the test."""
    return _topic_factory(tansu.client, request)
