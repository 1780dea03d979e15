"""``writeMode=upsert`` on every PostgreSQL semantic (deletes by key, sequenceColumn ordering),
against the real server; the table read back with psycopg. Also the ``txnAppId`` record of the
upsert semantic with a checkpointLocation."""

from __future__ import annotations

import uuid

import psycopg
import pytest

from sparklink.errors import ConfigError

SCHEMA = "id LONG, op STRING, seq LONG, v STRING"
SEED = [(1, "c", 10, "a"), (2, "c", 10, "b"), (3, "c", 10, "c"), (4, "c", 10, "d")]
# repeated keys (1, 6) resolved by seq, not row order; an update (3) and a delete (4) older than
# the stored row are skipped; a delete (2); a new key (5)
CHANGES = [(1, "u", 12, "a3"), (1, "u", 11, "a2"), (2, "d", 11, None), (3, "u", 5, "old"), (4, "d", 9, None),
           (5, "c", 1, "e"), (6, "c", 3, "f"), (6, "d", 2, None)]
EXPECTED = {1: (12, "a3"), 3: (10, "c"), 4: (10, "d"), 5: (1, "e"), 6: (3, "f")}


def fresh_table() -> str:
    return f"c_{uuid.uuid4().hex[:10]}"


def write_changes(spark, postgres, table: str, rows: list[tuple], semantic: str, checkpoint: str, **extra) -> None:
    """One df.write of ``rows`` in one task (so a key's changes meet in one task)."""
    writer = (spark.createDataFrame(rows, SCHEMA).coalesce(1).write.format("sparklink.postgres").mode("append")
              .option("dsn", postgres.dsn).option("table", table).option("semantic", semantic)
              .option("writeMode", "upsert").option("keyColumns", "id").option("opColumn", "op")
              .option("sequenceColumn", "seq").option("checkpointLocation", checkpoint))
    for key, value in extra.items():
        writer = writer.option(key, value)
    writer.save()


def arrow_schema():
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    return StructType([StructField("id", LongType()), StructField("op", StringType()),
                       StructField("seq", LongType()), StructField("v", StringType())])


def changes_batch(rows: list[tuple]):
    import pyarrow as pa

    ids, ops, seqs, values = zip(*rows, strict=True)
    return pa.record_batch({"id": pa.array(ids, pa.int64()), "op": pa.array(ops, pa.string()),
                            "seq": pa.array(seqs, pa.int64()), "v": pa.array(values, pa.string())})


def write_job(options: dict, rows: list[tuple], job_id: str, partitions: int = 1) -> None:
    """A df.write job as Spark's adapter runs it, without Spark: the sink built on the "driver",
    one writer per task (rows dealt to tasks by key), then the SDK's commit."""
    from sparklink.postgres.connector import PostgresSinkConnector
    from sparklink.sink import WriterContext
    from sparklink.sink.protocol import commit_batch

    sink = PostgresSinkConnector(options, arrow_schema())
    committables = []
    for partition in range(partitions):
        writer = sink.create_writer(WriterContext(partition_id=partition, attempt_number=0, task_attempt_id=partition,
                                                  job_id=job_id, batch_id=None, query_id=None))
        mine = [row for row in rows if row[0] % partitions == partition]
        if mine:
            writer.write_batch(changes_batch(mine))
        writer.flush()
        committables += writer.prepare_commit()
        writer.close()
    commit_batch(sink, None, job_id, committables)


def changelog_options(postgres, table: str, semantic: str, tmp_path) -> dict:
    return {"dsn": postgres.dsn, "table": table, "semantic": semantic, "writeMode": "upsert", "keyColumns": "id",
            "opColumn": "op", "sequenceColumn": "seq", "checkpointLocation": str(tmp_path / "ck")}


def staging_tables(conn, options: dict) -> list[str]:
    """The two-phase staging tables (``sparklink_cl_sl_<sinkId>_...``) of the sink ``options`` build."""
    from sparklink.postgres.sink_config import PostgresSinkConfig

    sink_id = PostgresSinkConfig.from_options(options).sink_id
    return [r[0] for r in conn.execute("SELECT relname FROM pg_class WHERE relname LIKE %s",
                                       (f"sparklink\\_cl\\_sl\\_{sink_id}\\_%",)).fetchall()]


def table_state(postgres, table: str) -> dict:
    with postgres.connect() as conn:
        return {r[0]: (r[1], r[2]) for r in conn.execute(f'SELECT id, seq, v FROM "{table}"').fetchall()}


@pytest.mark.parametrize("semantic", ["upsert", "two-phase", "write-ahead", "at-least-once"])
def test_changes_are_applied_by_key_in_sequence_order(postgres, tmp_path, semantic):
    table = fresh_table()
    options = {"dsn": postgres.dsn, "table": table, "semantic": semantic, "writeMode": "upsert", "keyColumns": "id",
               "opColumn": "op", "sequenceColumn": "seq", "checkpointLocation": str(tmp_path / "ck")}
    write_job(options, SEED, "seed", partitions=2)
    write_job(options, CHANGES, "changes", partitions=2)
    assert table_state(postgres, table) == EXPECTED
    write_job(options, CHANGES, "replayed", partitions=2)  # the same changes again: nothing moves
    assert table_state(postgres, table) == EXPECTED
    with postgres.connect() as conn:
        columns = [r[0] for r in conn.execute("SELECT column_name FROM information_schema.columns WHERE table_name = %s "
                                              "ORDER BY ordinal_position", (table,)).fetchall()]
        prepared = conn.execute("SELECT count(*) FROM pg_prepared_xacts").fetchone()[0]
        staging = staging_tables(conn, options)
    assert columns == ["id", "seq", "v"]  # the opColumn is not stored
    assert (prepared, staging) == (0, [])


def test_changes_without_sequence_column_last_in_task_order_wins(postgres):
    table = fresh_table()
    options = {"dsn": postgres.dsn, "table": table, "writeMode": "upsert", "keyColumns": "id", "opColumn": "op"}
    rows = [(1, "c", 0, "a"), (2, "c", 0, "b"), (1, "u", 0, "a2"), (2, "d", 0, None), (3, "r", 0, "c"),
            (3, None, 0, "c2")]
    write_job(options, rows, "one")
    with postgres.connect() as conn:
        assert dict(conn.execute(f'SELECT id, v FROM "{table}"').fetchall()) == {1: "a2", 3: "c2"}


def test_changelog_options_are_checked_before_anything_is_written(postgres):
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    from sparklink.postgres.connector import PostgresSinkConnector as create_sink

    schema = StructType([StructField("id", LongType()), StructField("v", StringType())])
    base = {"dsn": postgres.dsn, "table": fresh_table(), "writeMode": "upsert"}
    with pytest.raises(ConfigError, match="keyColumns.*required for writeMode=upsert"):
        create_sink(base, schema)
    with pytest.raises(ConfigError, match="sequenceColumn.*'seq' is not in the DataFrame"):
        create_sink({**base, "keyColumns": "id", "sequenceColumn": "seq"}, schema)
    with pytest.raises(ConfigError, match="opColumn.*writeMode=append"):
        create_sink({**base, "writeMode": "append", "keyColumns": "id", "opColumn": "v"}, schema)


def test_a_tie_in_the_sequence_column_fails_the_task_and_commits_nothing(postgres):
    """Driven on the writer directly (no Spark): the task's reduction refuses the tie, naming
    the key, and the task's transaction is rolled back."""
    import pyarrow as pa
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    from sparklink.postgres.connector import PostgresSinkConnector
    from sparklink.sink import WriterContext

    table = fresh_table()
    schema = StructType([StructField("id", LongType()), StructField("op", StringType()),
                         StructField("seq", LongType()), StructField("v", StringType())])
    sink = PostgresSinkConnector({"dsn": postgres.dsn, "table": table, "writeMode": "upsert", "keyColumns": "id",
                                  "opColumn": "op", "sequenceColumn": "seq"}, schema)
    writer = sink.create_writer(WriterContext(partition_id=0, attempt_number=0, task_attempt_id=0, job_id="job",
                                              batch_id=None, query_id=None))
    writer.write_batch(pa.record_batch({"id": pa.array([2, 1, 1], pa.int64()), "op": ["d", "u", "u"],
                                        "seq": pa.array([11, 11, 11], pa.int64()), "v": [None, "x", "y"]}))
    writer.flush()
    with pytest.raises(ConfigError, match=r"two changes of key id=1 carry the same seq 11"):
        writer.prepare_commit()
    writer.abort()
    writer.close()
    assert table_state(postgres, table) == {}


def test_two_phase_change_refused_by_the_target_fails_the_commit_and_the_next_write_applies_it(postgres, tmp_path):
    """two-phase applies a task's staged changes in the driver's commit, after COMMIT PREPARED:
    a change the target refuses (here a CHECK constraint) fails that commit, naming the task's
    transaction, and leaves its staging table committed; once the table accepts it, the next
    write's roll-forward applies it (and the marker), then drops the staging table."""
    table = fresh_table()
    options = changelog_options(postgres, table, "two-phase", tmp_path)
    write_job(options, SEED, "seed")
    with postgres.connect() as conn:
        conn.execute(f'ALTER TABLE "{table}" ADD CONSTRAINT no_bad CHECK (v <> \'bad\')')
    with pytest.raises(Exception, match=r"applying the changes staged by sl_.*no_bad"):
        write_job(options, [(1, "u", 20, "bad"), (2, "d", 20, None)], "refused")
    with postgres.connect() as conn:
        staged = staging_tables(conn, options)
        conn.execute(f'ALTER TABLE "{table}" DROP CONSTRAINT no_bad')
    assert len(staged) == 1, staged  # committed, waiting for its apply
    assert table_state(postgres, table) == {1: (10, "a"), 2: (10, "b"), 3: (10, "c"), 4: (10, "d")}
    write_job(options, [(5, "c", 20, "e")], "next")  # its commit first rolls the refused one forward
    assert table_state(postgres, table) == {1: (20, "bad"), 3: (10, "c"), 4: (10, "d"), 5: (20, "e")}
    with postgres.connect() as conn:
        left = staging_tables(conn, options)
        prepared = conn.execute("SELECT count(*) FROM pg_prepared_xacts").fetchone()[0]
    assert (left, prepared) == ([], 0)


def test_two_phase_refuses_a_staging_table_emptied_before_its_apply(postgres, tmp_path):
    """The roll-forward applies a committed staging table only if it holds exactly what its task
    staged: one emptied in between (as PostgreSQL empties an UNLOGGED table after a server crash,
    the reason it is a logged table) fails the commit naming it, instead of losing the changes."""
    from sparklink.errors import CommitError
    from sparklink.postgres.connector import PostgresSinkConnector
    from sparklink.sink import WriterContext
    from sparklink.sink.protocol import commit_batch

    table = fresh_table()
    options = changelog_options(postgres, table, "two-phase", tmp_path)
    sink = PostgresSinkConnector(options, arrow_schema())
    writer = sink.create_writer(WriterContext(partition_id=0, attempt_number=0, task_attempt_id=0, job_id="emptied",
                                              batch_id=None, query_id=None))
    writer.write_batch(changes_batch(SEED))
    writer.flush()
    committables = writer.prepare_commit()
    writer.close()
    [committable] = committables
    assert (committable["v"], committable["deletes"], committable["upserts"]) == (2, 0, 4)
    with postgres.connect(autocommit=True) as conn:
        conn.execute(f"COMMIT PREPARED '{committable['gid']}'")  # as the committer does, then "a crash"
        conn.execute(f'TRUNCATE "{committable["staging"]}"')
    try:
        with pytest.raises(CommitError, match=r"holds 0 deletes and 0 upserts, but its task staged 0 and 4"):
            commit_batch(sink, None, "emptied", committables)
        assert table_state(postgres, table) == {}
    finally:
        with postgres.connect(autocommit=True) as conn:
            conn.execute(f'DROP TABLE "{committable["staging"]}"')


def test_upsert_write_with_txn_and_checkpoint_is_skipped_when_repeated(spark, postgres, tmp_path):
    """The pair is recorded in the commit log when a checkpointLocation is given: the repeated
    write must find it there (it looked in sparklink_txns only, and wrote again)."""
    table = fresh_table()
    ck = str(tmp_path / "ck")
    write_changes(spark, postgres, table, SEED, "upsert", ck, txnAppId="app", txnVersion="7")
    write_changes(spark, postgres, table, [(1, "u", 20, "again")], "upsert", ck, txnAppId="app", txnVersion="7")
    assert table_state(postgres, table)[1] == (10, "a")


# -- the conformance suite's simulated crashes on writeMode=upsert --------------------------------------
# (ids as keys; a replay re-applies the same changes by key). The Spark-driven members run on the
# append classes of tests/conformance/test_sink_conformance.py (the same commit protocol).

from tests.conformance.test_sink_conformance import PostgresCase  # noqa: E402


class ChangelogCase(PostgresCase):
    sigkill_points = ()  # the changelog's real SIGKILL sequence: tests/postgres/test_exactly_once.py

    @pytest.fixture
    def sink_options(self, tmp_path, postgres):
        return {"dsn": postgres.dsn, "table": f"conformance_cl_{uuid.uuid4().hex[:10]}", "semantic": self.semantic,
                "checkpointLocation": str(tmp_path / "ck"), "writeMode": "upsert", "keyColumns": "id"}

    def test_task_failing_on_its_first_attempt(self):
        pytest.skip("the append class runs it with Spark (the same commit protocol)")

    def test_second_query_on_the_same_output_is_refused(self):
        pytest.skip("the append class runs it with Spark")


class TestPostgresChangelogTwoPhase(ChangelogCase):
    semantic = "two-phase"
    # before_changelog_apply: after a task's COMMIT PREPARED (its staging table committed), before
    # the driver's transaction that applies it: the roll-forward must apply it from the table
    connector_points = ("postgres.after_prepare", "postgres.before_changelog_apply",
                        "postgres.between_commit_prepared")

    @pytest.fixture
    def sink_options(self, tmp_path, postgres):
        """Every connection of the sink waits at most 5 s for a lock: an attempt that waited for
        another attempt's row locks (the prepared transaction holding the target's rows) fails
        the two-attempts case in seconds, naming the lock, instead of hanging to the timeout."""
        return {"dsn": f"{postgres.dsn} options='-c lock_timeout=5s'",
                "table": f"conformance_cl_{uuid.uuid4().hex[:10]}", "semantic": self.semantic,
                "checkpointLocation": str(tmp_path / "ck"), "writeMode": "upsert", "keyColumns": "id"}

    def leftovers(self, options):
        """No prepared transaction and no staging table of this sink left (committed or not)."""
        with psycopg.connect(options["dsn"]) as conn:
            return super().leftovers(options) + staging_tables(conn, options)


def test_staging_table_names_fit_an_identifier_and_differ_per_attempt():
    """A gid too long for ``sparklink_cl_<gid>`` (a 40-character sinkId) gets a digest, not a
    truncation that two attempts of one task would share (the second CREATE TABLE would wait)."""
    from sparklink.postgres.changelog_apply import staging_table_name

    short = "sl_0123456789abcdef_7_3_0_abcdef12"
    assert staging_table_name(short) == f"sparklink_cl_{short}"
    sink = "x" * 40
    first, second = (staging_table_name(f"sl_{sink}_123456_17_{attempt}_abcdef12") for attempt in (0, 1))
    assert first != second and len(first) <= 63 and len(second) <= 63


class TestPostgresChangelogWriteAhead(ChangelogCase):
    semantic = "write-ahead"
    connector_points = ("postgres.before_wal_commit",)
