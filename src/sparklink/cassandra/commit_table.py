"""The checkpoint-committer table (Flink's ``CassandraCommitter``): which batches a sink has
written to Cassandra (driver side).

``sparklink_commits`` (or ``commitTable``), in the target's keyspace unless qualified, one row
per written batch: ``sink_id`` (a hash of the checkpoint location and the target: one
partition per sink), ``batch_key`` (the micro-batch id, ``job-<id>`` for a ``df.write``, or
``txn-<app>-<version>`` for a ``df.write`` with ``txnAppId`` / ``txnVersion``), ``row_count``
and ``committed_at``. Format version 1.

``write-ahead`` writes a batch's row after all of the batch's rows are acknowledged, and a
commit that finds the row writes nothing. A crash between the two leaves rows without a
record: the roll-forward rewrites the same rows from the staged batch (the reference's
caveat; harmless for upserts by primary key). Rows of micro-batches older than the commit
log's retention are deleted after each commit.
"""

from __future__ import annotations

from typing import Any

from sparklink.cassandra.target_table import quote

COMMIT_TABLE_VERSION = 1


def _name(keyspace: str, table: str) -> str:
    return f"{quote(keyspace)}.{quote(table)}"


def ensure_commit_table(session: Any, keyspace: str, table: str) -> None:
    """Create the table if ``system_schema`` does not list it (the driver waits for schema
    agreement after the DDL)."""
    found = list(session.execute("SELECT table_name FROM system_schema.tables WHERE keyspace_name = %s "
                                 "AND table_name = %s", (keyspace, table)))
    if not found:
        session.execute(f"CREATE TABLE IF NOT EXISTS {_name(keyspace, table)} (sink_id text, batch_key text, "
                        "row_count bigint, committed_at timestamp, PRIMARY KEY ((sink_id), batch_key))")


def batch_recorded(session: Any, keyspace: str, table: str, *, sink_id: str, batch_key: str) -> bool:
    rows = session.execute(f"SELECT batch_key FROM {_name(keyspace, table)} WHERE sink_id = %s AND batch_key = %s",
                           (sink_id, batch_key))
    return rows.one() is not None


def record_batch(session: Any, keyspace: str, table: str, *, sink_id: str, batch_key: str, row_count: int) -> None:
    session.execute(f"INSERT INTO {_name(keyspace, table)} (sink_id, batch_key, row_count, committed_at) "
                    "VALUES (%s, %s, %s, toTimestamp(now()))", (sink_id, batch_key, row_count))


def forget_batches(session: Any, keyspace: str, table: str, *, sink_id: str, batch_keys: list[str]) -> None:
    """Delete the rows of ``batch_keys`` (micro-batches past the commit log's retention)."""
    for key in batch_keys:
        session.execute(f"DELETE FROM {_name(keyspace, table)} WHERE sink_id = %s AND batch_key = %s",
                        (sink_id, key))
