"""Apache Cassandra: the ``sparklink.cassandra`` sink, ``semantic`` upsert (idempotent writes by
primary key) or write-ahead (Flink's GenericWriteAheadSink with a CheckpointCommitter table).
See docs/cassandra.md."""
