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


def upsert_rows(spark, postgres, table: str, rows: list[tuple], schema: str = "id LONG, v STRING") -> None:
    """Upsert ``rows`` in one task (so "the last row of a key wins" is about list order)."""
    (spark.createDataFrame(rows, schema).coalesce(1).write.format("sparklink.postgres").mode("append")
     .option("dsn", postgres.dsn).option("table", table).option("semantic", "upsert").option("keyColumns", "id")
     .save())


def test_upsert_updates_changed_rows_and_leaves_identical_ones_untouched(spark, postgres):
    """A replay of the same values writes no new row versions (xmin stays); changed values win."""
    table = fresh_table()
    upsert_rows(spark, postgres, table, [(i, f"v{i}") for i in range(10)])
    with postgres.connect() as conn:
        before = dict(conn.execute(f'SELECT id, xmin::text FROM "{table}"').fetchall())
    upsert_rows(spark, postgres, table, [(i, f"v{i}") for i in range(10)] + [(3, "changed"), (10, "new")])
    with postgres.connect() as conn:
        after = {r[0]: (r[1], r[2]) for r in conn.execute(f'SELECT id, v, xmin::text FROM "{table}"').fetchall()}
    assert {k: v for k, (v, _) in after.items()} == {**{i: f"v{i}" for i in range(10)}, 3: "changed", 10: "new"}
    assert [k for k in before if after[k][1] != before[k]] == [3]


def test_upsert_into_a_json_column_which_has_no_equality_operator(spark, postgres):
    table = fresh_table()
    with postgres.connect() as conn:
        conn.execute(f'CREATE TABLE "{table}" (id bigint PRIMARY KEY, v json)')
    upsert_rows(spark, postgres, table, [(1, '{"a": 1}'), (2, '{"b": 2}')])
    upsert_rows(spark, postgres, table, [(1, '{"a": 1}'), (2, '{"b": 3}'), (2, '{"b": 4}')])
    with postgres.connect() as conn:
        rows = conn.execute(f'SELECT id, v::text FROM "{table}" ORDER BY id').fetchall()
    assert rows == [(1, '{"a": 1}'), (2, '{"b": 4}')]


def upsert_writer(postgres, table: str, partition: int = 0):
    """An upsert writer of (id bigint, v text) rows, driven directly in this process."""
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    from sparklink.postgres.upsert_sink import UpsertSink
    from sparklink.sink import WriterContext

    schema = StructType([StructField("id", LongType()), StructField("v", StringType())])
    sink = UpsertSink({"dsn": postgres.dsn, "table": table, "semantic": "upsert", "keyColumns": "id"}, schema)
    return sink.create_writer(WriterContext(partition_id=partition, attempt_number=0, task_attempt_id=partition,
                                            job_id="job", batch_id=None, query_id=None))


def id_batch(ids, value: str):
    import pyarrow as pa

    return pa.record_batch({"id": pa.array(list(ids), pa.int64()), "v": [value] * len(ids)})


def test_upsert_sends_new_keys_straight_to_the_table_and_stages_from_the_first_collision(postgres, caplog):
    """New keys go straight into the table, in savepoint windows of 1, 1, then 2 batches. A batch
    of the fourth window repeats a key of the first: that window is undone and re-sent through
    the staging table, and the last value of each key wins."""
    caplog.set_level("INFO", logger="sparklink.postgres.upsert_sink")
    table = fresh_table()
    with postgres.connect() as conn:
        conn.execute(f'CREATE TABLE "{table}" (id bigint PRIMARY KEY, v text)')
    writer = upsert_writer(postgres, table)
    for start in range(0, 40, 10):  # windows: [0-9], [10-19], [20-39]
        writer.write_batch(id_batch(range(start, start + 10), "first"))
        assert not writer.staging
    writer.write_batch(id_batch(range(40, 50), "first"))  # the next window, closed by flush()
    writer.write_batch(id_batch([5, 50], "second"))  # 5 was sent in the first window
    writer.write_batch(id_batch([50, 51], "third"))
    writer.flush()  # the server reports the collision when the window's COPY ends
    assert writer.staging and "through a staging table" in caplog.text
    assert writer.prepare_commit()[0]["rows"] == 54
    writer.close()
    expected = {k: "first" for k in range(50)} | {5: "second", 50: "third", 51: "third"}
    with postgres.connect() as conn:
        assert dict(conn.execute(f'SELECT id, v FROM "{table}"').fetchall()) == expected


def test_upsert_of_new_keys_waits_for_a_concurrent_task_and_then_merges(postgres, caplog):
    """Two tasks send overlapping new keys straight to the table: the second waits on the
    first's uncommitted key 3, gets a unique violation when the first commits, and merges its
    rows through the staging table instead; its rows win."""
    import threading

    caplog.set_level("INFO", logger="sparklink.postgres.upsert_sink")
    table = fresh_table()
    with postgres.connect() as conn:
        conn.execute(f'CREATE TABLE "{table}" (id bigint PRIMARY KEY, v text)')
    first, second = upsert_writer(postgres, table, 0), upsert_writer(postgres, table, 1)
    first.write_batch(id_batch([1, 2, 3], "first"))
    first.flush()
    sending = threading.Thread(target=lambda: second.write_batch(id_batch([3, 4], "second")))
    sending.start()
    sending.join(timeout=2)
    assert sending.is_alive(), "the second task's COPY should wait for the first task's key 3"
    first.prepare_commit()
    first.close()
    sending.join(timeout=30)
    assert second.staging and "UniqueViolation" in caplog.text
    second.flush()
    second.prepare_commit()
    second.close()
    with postgres.connect() as conn:
        assert conn.execute(f'SELECT id, v FROM "{table}" ORDER BY id').fetchall() == [
            (1, "first"), (2, "first"), (3, "second"), (4, "second")]


def test_upsert_falls_back_to_on_conflict_when_a_concurrent_writer_inserts_the_same_key(spark, postgres, caplog):
    """The set-based merge meets a key another transaction inserted meanwhile (unique violation);
    the writer takes the ON CONFLICT route and its row wins. Driven on the writer directly, in
    this process, against the real server, so the interleaving is exact. Key 0 exists, so the
    task's rows go through the staging table rather than straight into the table."""
    import threading

    import pyarrow as pa

    caplog.set_level("INFO", logger="sparklink.postgres.upsert_sink")
    table = fresh_table()
    with postgres.connect() as conn:
        conn.execute(f'CREATE TABLE "{table}" (id bigint PRIMARY KEY, v text)')
        conn.execute(f"INSERT INTO \"{table}\" VALUES (0, 'old')")
    writer = upsert_writer(postgres, table)
    writer.write_batch(pa.record_batch({"id": pa.array([0, 1, 2, 3], pa.int64()), "v": ["ours"] * 4}))
    writer.flush()
    assert writer.staging
    with postgres.connect() as other:
        other.execute(f"INSERT INTO \"{table}\" VALUES (2, 'theirs')")  # not committed yet: holds key 2
        outcome: list[object] = []
        merging = threading.Thread(target=lambda: outcome.append(writer.prepare_commit()))
        merging.start()
        merging.join(timeout=2)
        assert merging.is_alive(), "the set-based INSERT should wait for the other transaction's key"
        other.commit()
    merging.join(timeout=30)
    writer.close()
    assert "merging with ON CONFLICT instead" in caplog.text
    assert outcome and outcome[0][0]["rows"] == 4
    with postgres.connect() as conn:
        assert conn.execute(f'SELECT id, v FROM "{table}" ORDER BY id').fetchall() == [(k, "ours") for k in range(4)]
