"""Fixtures of the Cassandra tests (the shared node ``cassandra`` is the harness plugin's,
sparklink.testing.fixtures): a keyspace for the run and a fresh table per test."""

from __future__ import annotations

import itertools
import os

import pytest

KEYSPACE = "sparklink_tests"
_numbers = itertools.count()


@pytest.fixture(scope="session")
def cassandra_session(cassandra):
    """A driver session on the shared node, with the tests' keyspace (replication factor 1)."""
    cluster = cassandra.cluster()
    session = cluster.connect()
    session.execute(f"CREATE KEYSPACE IF NOT EXISTS {KEYSPACE} WITH replication = "
                    "{'class': 'SimpleStrategy', 'replication_factor': 1}")
    yield session
    cluster.shutdown()


@pytest.fixture
def new_table(cassandra_session):
    """``new_table("id bigint PRIMARY KEY, split int")``: a new table in the tests' keyspace; its name."""
    def create(columns: str, prefix: str = "t") -> str:
        name = f"{prefix}_{os.getpid()}_{next(_numbers)}"
        cassandra_session.execute(f"CREATE TABLE {KEYSPACE}.{name} ({columns})")
        return name
    return create


def sink_options(cassandra, table: str, **extra) -> dict:
    """The ``sparklink.cassandra`` options of ``table`` in the tests' keyspace."""
    return dict(cassandra.options(), keyspace=KEYSPACE, table=table, **extra)
