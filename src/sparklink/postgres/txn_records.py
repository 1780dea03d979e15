"""``txnAppId`` / ``txnVersion`` on PostgreSQL (driver side): the table ``sparklink_txns``
beside the target records each idempotent ``df.write`` (see :mod:`sparklink.sink.txn`).

Format version 1: columns target (the target table's qualified name), app_id, version,
committed_at; primary key (target, app_id, version). ``semantic=upsert`` writes the row after
the job's tasks committed their transactions: a crash between the two makes the replayed write
upsert the same rows again (idempotent), then record the pair.
"""

from __future__ import annotations

import psycopg
from psycopg import sql

from sparklink.postgres.identifiers import TableName
from sparklink.sink.txn import Txn

TXN_TABLE = "sparklink_txns"


def _table(target: TableName) -> sql.Composable:
    return target.sibling(TXN_TABLE).identifier


def ensure_txn_table(conn: psycopg.Connection, target: TableName) -> None:
    conn.execute(sql.SQL("CREATE TABLE IF NOT EXISTS {} (target text NOT NULL, app_id text NOT NULL, "
                         "version bigint NOT NULL, committed_at timestamptz NOT NULL DEFAULT now(), "
                         "PRIMARY KEY (target, app_id, version))").format(_table(target)))


def txn_recorded(conn: psycopg.Connection, target: TableName, txn: Txn) -> bool:
    ensure_txn_table(conn, target)
    row = conn.execute(sql.SQL("SELECT 1 FROM {} WHERE target = %s AND app_id = %s AND version = %s")
                       .format(_table(target)), (str(target), txn.app_id, txn.version)).fetchone()
    conn.commit()
    return row is not None


def record_txn(conn: psycopg.Connection, target: TableName, txn: Txn) -> None:
    """Record the pair (in the caller's transaction; idempotent)."""
    ensure_txn_table(conn, target)
    conn.execute(sql.SQL("INSERT INTO {} (target, app_id, version) VALUES (%s, %s, %s) ON CONFLICT DO NOTHING")
                 .format(_table(target)), (str(target), txn.app_id, txn.version))
