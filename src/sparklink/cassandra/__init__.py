"""Apache Cassandra: the ``sparklink.cassandra`` sink, ``semantic`` upsert (idempotent writes by
primary key) or write-ahead (Flink's GenericWriteAheadSink with a CheckpointCommitter table).
See docs/cassandra.md."""

from __future__ import annotations

from sparklink.contract import ConnectorSpec, FormatSpec, OptionsDoc

#: The connector contract (ARCHITECTURE.md, "Adding a connector"): read by sparklink.connectors.
CONNECTOR = ConnectorSpec(
    package="cassandra",
    formats=(FormatSpec(
        name="sparklink.cassandra",
        sink="sparklink.cassandra.sink:CassandraSinkConnector",
        sink_options=OptionsDoc("sparklink.cassandra.config:CassandraSinkOptions", "docs/cassandra.md", "cassandra-sink"),
    ),),
)
