"""Each sink semantic against the real PostgreSQL fixture, driven by local Spark."""

from __future__ import annotations

import uuid

import pytest

from tests.postgres.jobs import stream_sequence

SEMANTICS = ["upsert", "two-phase", "write-ahead", "at-least-once"]


def fresh_table() -> str:
    return f"t_{uuid.uuid4().hex[:10]}"


def ids_in(postgres, table: str) -> list[int]:
    with postgres.connect() as conn:
        return [r[0] for r in conn.execute(f'SELECT id FROM "{table}" ORDER BY id').fetchall()]


def prepared(postgres) -> list[str]:
    with postgres.connect() as conn:
        return [r[0] for r in conn.execute("SELECT gid FROM pg_prepared_xacts").fetchall()]


@pytest.mark.parametrize("semantic", SEMANTICS, ids=SEMANTICS)
def test_stream_writes_every_row_once(spark, postgres, tmp_path, semantic):
    table = fresh_table()
    stream_sequence(spark, dsn=postgres.dsn, table=table, checkpoint=str(tmp_path / "ck"), semantic=semantic,
                    num_splits=2, rows_per_split=30, max_rows=25)
    assert ids_in(postgres, table) == list(range(60))
    assert prepared(postgres) == []


def test_upsert_keeps_the_last_row_of_a_key_across_arrow_batches(spark, postgres):
    """One task, several Arrow batches (25,000 rows), 100 keys: each key ends with its last row."""
    table = fresh_table()
    frame = spark.range(0, 25_000, numPartitions=1).selectExpr("id % 100 AS id", "id AS v",
                                                                 "timestamp_seconds(id) AS at")
    (frame.write.format("sparklink.postgres").mode("append").option("dsn", postgres.dsn).option("table", table)
     .option("semantic", "upsert").option("keyColumns", "id").save())
    with postgres.connect() as conn:
        rows = conn.execute(f'SELECT id, v, extract(epoch FROM at)::bigint FROM "{table}" ORDER BY id').fetchall()
    assert rows == [(k, 24_900 + k, 24_900 + k) for k in range(100)]
