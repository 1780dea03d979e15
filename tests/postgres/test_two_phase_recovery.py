"""Two-phase sink: a server without prepared transactions, a batch job killed inside its commit,
pruning of old commit markers, and the once-per-run clean-up of prepared transactions."""

from __future__ import annotations

import uuid

import pytest
from pyspark.sql.types import LongType, StructField, StructType

from sparklink.errors import ConfigError
from sparklink.postgres.commit_markers import insert_marker
from sparklink.postgres.sink_config import PostgresSinkConfig
from sparklink.postgres.two_phase_sink import TwoPhaseSink, gid_prefix
from tests.postgres.jobs import batch_write

SCHEMA = StructType([StructField("id", LongType())])


def _options(server, table: str, checkpoint) -> dict[str, str]:
    return {"dsn": server.dsn, "table": table, "semantic": "two-phase", "checkpointLocation": str(checkpoint)}


def test_no_prepared_transactions_is_a_clear_error_at_start(spark, postgres_without_prepared_transactions, tmp_path):
    server = postgres_without_prepared_transactions
    table = f"np_{uuid.uuid4().hex[:8]}"
    with pytest.raises(ConfigError, match=r"max_prepared_transactions = 0.*upsert, write-ahead, at-least-once"):
        TwoPhaseSink(_options(server, table, tmp_path / "ck"), SCHEMA)
    with pytest.raises(Exception, match=r"max_prepared_transactions = 0") as failure:
        (spark.range(3).write.format("sparklink.postgres").mode("append").options(
            **_options(server, table, tmp_path / "ck")).save())
    assert server.password not in str(failure.value)
    with server.connect() as conn:  # nothing was written
        assert conn.execute("SELECT to_regclass(%s)", (table,)).fetchone()[0] in (None, table)
        if conn.execute("SELECT to_regclass(%s)", (table,)).fetchone()[0]:
            assert conn.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0] == 0


@pytest.mark.slow
def test_batch_job_killed_after_its_commit_was_logged_is_rolled_forward_by_the_next_write(driver, postgres,
                                                                                           tmp_path, spark):
    """A df.write is not replayed by Spark. Killed after the commit decision (log written,
    transactions still prepared), its rows are committed when the next write with the same
    checkpointLocation and table builds the sink. Re-running the same job is a new job: its
    rows are appended again (use semantic=upsert for re-runnable batch jobs)."""
    table = f"bk_{uuid.uuid4().hex[:10]}"
    args = dict(dsn=postgres.dsn, table=table, checkpoint=str(tmp_path / "ck"), semantic="two-phase", start=0, end=60)
    crashed = driver.run("tests.postgres.jobs:batch_write", args, fault="sink.after_log:kill",
                         once_marker=str(tmp_path / "fired"))
    assert crashed.killed, crashed.output
    with postgres.connect() as conn:
        assert conn.execute("SELECT count(*) FROM pg_prepared_xacts").fetchone()[0] == 2  # both tasks, locked
        assert conn.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0] == 0  # not visible yet
    batch_write(spark, **args)  # the next write, in the test's own session
    with postgres.connect() as conn:
        counts = conn.execute(f'SELECT id, count(*) FROM "{table}" GROUP BY id ORDER BY id').fetchall()
        leftovers = conn.execute("SELECT gid FROM pg_prepared_xacts").fetchall()
        sink_id = PostgresSinkConfig.from_options(_options(postgres, table, tmp_path / "ck")).sink_id
        jobs = conn.execute("SELECT count(DISTINCT batch_key) FROM sparklink_commit_markers WHERE sink_id = %s "
                            "AND batch_key LIKE 'job-%%'", (sink_id,)).fetchone()[0]
    assert leftovers == []
    assert counts == [(i, 2) for i in range(60)]  # the crashed job (rolled forward) and the re-run
    assert jobs == 2


def test_markers_older_than_the_commit_log_retention_are_pruned(postgres, tmp_path):
    table = f"pm_{uuid.uuid4().hex[:8]}"
    sink = TwoPhaseSink(_options(postgres, table, tmp_path / "ck"), SCHEMA)
    sink_id = sink.config.sink_id
    with postgres.connect() as conn:
        for batch in range(10):
            insert_marker(conn, sink.config.table, sink_id=sink_id, batch_key=str(batch), part=0,
                          txn=f"{gid_prefix(sink_id)}{batch}_0", row_count=1)
        insert_marker(conn, sink.config.table, sink_id=sink_id, batch_key="job-abc", part=0, txn="job", row_count=1)
        insert_marker(conn, sink.config.table, sink_id="othersink", batch_key="1", part=0, txn="other", row_count=1)
        conn.commit()
    sink.commit_log_retention = lambda: 3  # keep the last 3 batches (the SDK's default is 100)
    sink.post_commit(9, [])
    with postgres.connect() as conn:
        left = conn.execute("SELECT sink_id, batch_key FROM sparklink_commit_markers WHERE sink_id IN (%s, %s) "
                            "ORDER BY 1, 2", (sink_id, "othersink")).fetchall()
    assert sorted(left) == sorted([(sink_id, "7"), (sink_id, "8"), (sink_id, "9"), (sink_id, "job-abc"),
                                   ("othersink", "1")])


def test_concurrent_cleanup_of_an_earlier_executions_prepared_transactions(postgres):
    """The tasks of a replayed batch all roll back the earlier execution's prepared
    transactions at once; a transaction another session is finishing ("is busy") is left to
    it, so no task fails and none is left prepared."""
    import threading

    from sparklink.postgres.two_phase_sink import prepared_gids, rollback_prepared

    prefix = "sl_busytest_7_"
    with postgres.connect(autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS busy_test (id integer)")
    for round_number in range(3):
        for part in range(15):  # max_prepared_transactions is 20 on the fixture's server
            with postgres.connect() as conn:
                conn.execute("INSERT INTO busy_test SELECT generate_series(1, 2000)")
                conn.execute(f"PREPARE TRANSACTION '{prefix}{part:02d}_0_r{round_number}'")
        errors: list[BaseException] = []
        start = threading.Barrier(8)

        def clean_up():
            try:
                with postgres.connect(autocommit=True) as conn:
                    start.wait()
                    for gid in prepared_gids(conn, prefix):
                        rollback_prepared(conn, gid)
            except BaseException as exc:  # noqa: BLE001 - collected and asserted below
                errors.append(exc)

        threads = [threading.Thread(target=clean_up) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        with postgres.connect() as conn:
            assert prepared_gids(conn, prefix) == []


def test_restore_rolls_back_an_earlier_runs_prepared_transactions_and_leaves_the_open_batch(postgres, tmp_path):
    """The restore step (once per run): a transaction prepared for a batch the log already holds
    (an attempt of an earlier run whose commit message was not used) is rolled back; one of the
    batch in flight (not logged yet) is left for its commit."""
    from sparklink.sink import CommitLog
    from sparklink.sink.commit_log import STATE_FINISHED, CommitLogEntry
    from sparklink.sink.recovery import restore
    from sparklink.sink.sink import RestoreContext

    table = f"rr_{uuid.uuid4().hex[:8]}"
    sink = TwoPhaseSink(_options(postgres, table, tmp_path / "ck"), SCHEMA)
    CommitLog(sink.commit_log_dir()).put(CommitLogEntry(key="4", batch_id=4, state=STATE_FINISHED, committables=[]))
    prefix = gid_prefix(sink.config.sink_id)
    stale, in_flight = f"{prefix}4_1_0_aaaaaaaa", f"{prefix}5_0_0_bbbbbbbb"
    for gid in (stale, in_flight):
        with postgres.connect() as conn:
            conn.execute(f'INSERT INTO "{table}" VALUES (1)')
            conn.execute(f"PREPARE TRANSACTION '{gid}'")
    try:
        restore(sink, RestoreContext(query_id=None, run_id="run-2", reason="first commit of run run-2"))
        with postgres.connect() as conn:
            left = [r[0] for r in conn.execute("SELECT gid FROM pg_prepared_xacts WHERE gid LIKE %s",
                                               (prefix + "%",)).fetchall()]
        assert left == [in_flight]
    finally:
        with postgres.connect(autocommit=True) as conn:
            for gid in (stale, in_flight):
                if conn.execute("SELECT 1 FROM pg_prepared_xacts WHERE gid = %s", (gid,)).fetchone():
                    conn.execute(f"ROLLBACK PREPARED '{gid}'")
