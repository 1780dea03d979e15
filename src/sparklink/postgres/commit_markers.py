"""Commit markers: one row per committed transaction, written in that same transaction.

The table ``sparklink_commit_markers`` lives in the target table's schema. A marker row says
"the rows of transaction ``txn`` (sink ``sink_id``, batch ``batch_key``, partition ``part``)
are committed", and is visible exactly when those rows are. So:

* two-phase: a gid missing from ``pg_prepared_xacts`` whose marker exists was committed;
  a replayed batch whose markers exist is skipped by the writers (no duplicate key waits);
* write-ahead: the marker is Flink's CheckpointCommitter record, in the same transaction as
  the rows it guards.

Marker format version 1: columns sink_id, batch_key, part, txn, row_count, committed_at.
After each micro-batch commit, markers of batches older than the commit log's retention
(``Sink.commit_log_retention()``, 100 batches) are deleted (:func:`prune_markers`).
"""

from __future__ import annotations

import psycopg
from psycopg import sql

from sparklink.postgres.identifiers import TableName

MARKER_TABLE = "sparklink_commit_markers"


def marker_table(target: TableName) -> TableName:
    return target.sibling(MARKER_TABLE)


def ensure_marker_table(conn: psycopg.Connection, target: TableName) -> None:
    """Create the marker table if missing (driver side, at query start)."""
    conn.execute(sql.SQL(
        "CREATE TABLE IF NOT EXISTS {} (sink_id text NOT NULL, batch_key text NOT NULL, part integer NOT NULL, "
        "txn text NOT NULL, row_count bigint NOT NULL, committed_at timestamptz NOT NULL DEFAULT now(), "
        "PRIMARY KEY (sink_id, txn))").format(marker_table(target).identifier))
    conn.commit()


def insert_marker(conn: psycopg.Connection, target: TableName, *, sink_id: str, batch_key: str, part: int,
                  txn: str, row_count: int) -> None:
    conn.execute(sql.SQL("INSERT INTO {} (sink_id, batch_key, part, txn, row_count) VALUES (%s, %s, %s, %s, %s)")
                 .format(marker_table(target).identifier), (sink_id, batch_key, part, txn, row_count))


def marker_exists(conn: psycopg.Connection, target: TableName, *, sink_id: str, txn: str) -> bool:
    row = conn.execute(sql.SQL("SELECT 1 FROM {} WHERE sink_id = %s AND txn = %s")
                       .format(marker_table(target).identifier), (sink_id, txn)).fetchone()
    return row is not None


def batch_committed(conn: psycopg.Connection, target: TableName, *, sink_id: str, batch_key: str) -> bool:
    """True if any transaction of this batch is committed (then the whole batch is: its log
    entry was written before the first commit, and recovery finishes it before new tasks run)."""
    row = conn.execute(sql.SQL("SELECT 1 FROM {} WHERE sink_id = %s AND batch_key = %s LIMIT 1")
                       .format(marker_table(target).identifier), (sink_id, batch_key)).fetchone()
    return row is not None


def prune_markers(conn: psycopg.Connection, target: TableName, *, sink_id: str, before_batch: int) -> int:
    """Delete this sink's markers of micro-batches below ``before_batch`` (driver side, after a
    commit); returns how many. Markers are consulted only for batches Spark may replay and for
    entries still in the commit log, so older ones are dead weight. Markers of ``df.write``
    jobs (``job-...`` keys) are kept. Commits on ``conn``."""
    deleted = conn.execute(sql.SQL(
        "DELETE FROM {} WHERE sink_id = %s AND "
        "(CASE WHEN batch_key ~ '^[0-9]+$' THEN batch_key::bigint END) < %s")
        .format(marker_table(target).identifier), (sink_id, before_batch)).rowcount
    conn.commit()
    return deleted
