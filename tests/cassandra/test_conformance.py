"""Both semantics of ``sparklink.cassandra`` through the published conformance suite
(sparklink.testing.conformance) against the real node: simulated crashes at every fault point
(the SDK's and ``cassandra.before_record``), tasks failing on their first attempt, replays,
two attempts of one task, a commit called twice.

The write-ahead table's primary key is ``((id), split)``: ``split`` is the task that wrote the
row, which differs between a crashed attempt and its replay on another number of tasks, so a
batch applied twice would show as an id on two rows. The upsert table's key is ``id`` alone
(an upsert replaces a replayed row; with a non-deterministic key it would not, as documented).
The real driver SIGKILL of each semantic runs in test_exactly_once.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sparklink.cassandra.sink import CassandraSinkConnector
from sparklink.testing.conformance import SinkConformance
from tests.cassandra.conftest import KEYSPACE, sink_options


class CassandraCase(SinkConformance):
    format = "sparklink.cassandra"
    sink_factory = CassandraSinkConnector
    refuses_second_query = False  # several queries may write one table (documented in docs/cassandra.md)
    sigkill_points = ()  # its real SIGKILL sequences: tests/cassandra/test_exactly_once.py
    semantic = ""
    columns = ""

    @pytest.fixture
    def sink_options(self, tmp_path, cassandra, new_table, cassandra_session):
        self.session = cassandra_session
        table = new_table(self.columns, prefix=f"conformance_{self.semantic.replace('-', '_')}")
        return sink_options(cassandra, table, semantic=self.semantic, checkpointLocation=str(tmp_path / "ck"))

    def read_ids(self, options):
        rows = self.session.execute(f"SELECT id FROM {KEYSPACE}.{options['table']}")
        return sorted(row.id for row in rows)

    def leftovers(self, options):
        """Staged segments left with data (write-ahead)."""
        wal = Path(options["checkpointLocation"]) / "sparklink" / "wal"
        return sorted(str(p) for p in wal.glob("*") if p.is_file() and p.stat().st_size) if wal.exists() else []


class TestCassandraUpsert(CassandraCase):
    semantic = "upsert"
    columns = "id bigint PRIMARY KEY, split int"


class TestCassandraWriteAhead(CassandraCase):
    semantic = "write-ahead"
    columns = "id bigint, split int, PRIMARY KEY ((id), split)"
    connector_points = ("cassandra.before_record",)
