"""Exactly-once under crashes: SIGKILL of the driver at each step of the commit protocols, and
failed task attempts that Spark retries; after a restart every id is in the table once and no
prepared transaction is left."""

from __future__ import annotations

import uuid

import pytest

JOB = "tests.postgres.jobs:stream_sequence"
ROWS = 2 * 45

KILL_CASES = [
    ("two-phase", "postgres.after_prepare"),
    ("two-phase", "sink.after_log"),
    ("two-phase", "postgres.between_commit_prepared"),
    ("two-phase", "sink.after_commit"),
    ("write-ahead", "writer.after_write"),
    ("write-ahead", "sink.after_log"),
    ("write-ahead", "postgres.before_wal_commit"),
    ("upsert", "sink.after_log"),
]


def _check(postgres, table: str) -> None:
    with postgres.connect() as conn:
        ids = [r[0] for r in conn.execute(f'SELECT id FROM "{table}" ORDER BY id').fetchall()]
        leftovers = conn.execute("SELECT gid FROM pg_prepared_xacts").fetchall()
    assert ids == list(range(ROWS)), f"missing {sorted(set(range(ROWS)) - set(ids))}, duplicated/extra " \
                                     f"{len(ids) - len(set(ids))}"
    assert leftovers == []


@pytest.mark.slow
@pytest.mark.parametrize(("semantic", "point"), KILL_CASES, ids=[f"{s}-{p}" for s, p in KILL_CASES])
def test_driver_killed_then_restarted_writes_every_row_once(driver, postgres, tmp_path, semantic, point):
    table = f"k_{uuid.uuid4().hex[:10]}"
    args = dict(dsn=postgres.dsn, table=table, checkpoint=str(tmp_path / "ck"), semantic=semantic,
                num_splits=2, rows_per_split=45, max_rows=30)
    crashed = driver.run(JOB, args, fault=f"{point}:kill", once_marker=str(tmp_path / "fired"),
                         env={"SPARKLINK_FAULT_BATCH": "1"})
    assert crashed.killed, crashed.output
    if semantic == "two-phase" and point == "postgres.after_prepare":
        with postgres.connect() as conn:  # the crash left prepared transactions holding locks
            assert conn.execute("SELECT count(*) FROM pg_prepared_xacts").fetchone()[0] >= 1
    finished = driver.run(JOB, args)
    assert finished.ok, finished.output
    _check(postgres, table)


RETRY_CASES = [("two-phase", "postgres.after_prepare"), ("two-phase", "writer.after_write"),
               ("write-ahead", "writer.after_write"), ("upsert", "writer.after_write")]


@pytest.mark.slow
@pytest.mark.parametrize(("semantic", "point"), RETRY_CASES, ids=[f"{s}-{p}" for s, p in RETRY_CASES])
def test_failed_task_attempts_are_rolled_back(driver, postgres, tmp_path, semantic, point):
    table = f"r_{uuid.uuid4().hex[:10]}"
    args = dict(dsn=postgres.dsn, table=table, checkpoint=str(tmp_path / "ck"), semantic=semantic,
                num_splits=2, rows_per_split=45, max_rows=30)
    result = driver.run(JOB, args, fault=f"{point}:raise", master="local[2,3]",
                        env={"SPARKLINK_FAULT_ATTEMPT": "0", "SPARKLINK_FAULT_BATCH": "1"})
    assert result.ok, result.output
    _check(postgres, table)
