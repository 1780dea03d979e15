"""Exactly-once under crashes: SIGKILL of the driver at each step of the commit protocols, and
failed task attempts that Spark retries; after a restart every id is in the table once and no
prepared transaction is left."""

from __future__ import annotations

import uuid

import pytest

JOB = "tests.postgres.jobs:stream_sequence"
ROWS = 2 * 45

# The protocol points every sink shares (writer.after_write, sink.after_log, sink.after_commit)
# are killed at for each semantic in tests/conformance; here, the PostgreSQL-specific points,
# one query per semantic killed at one point per micro-batch.
KILL_SEQUENCES = [
    ("two-phase", ["postgres.after_prepare", "postgres.between_commit_prepared"]),
    ("write-ahead", ["postgres.before_wal_commit"]),
]


def _check(postgres, table: str, rows: int = ROWS) -> None:
    with postgres.connect() as conn:
        ids = [r[0] for r in conn.execute(f'SELECT id FROM "{table}" ORDER BY id').fetchall()]
        leftovers = conn.execute("SELECT gid FROM pg_prepared_xacts").fetchall()
    assert ids == list(range(rows)), f"missing {sorted(set(range(rows)) - set(ids))}, duplicated/extra " \
                                     f"{len(ids) - len(set(ids))}"
    assert leftovers == []


@pytest.mark.slow
@pytest.mark.parametrize(("semantic", "points"), KILL_SEQUENCES, ids=[s for s, _ in KILL_SEQUENCES])
def test_driver_killed_then_restarted_writes_every_row_once(driver, postgres, tmp_path, semantic, points):
    table = f"k_{uuid.uuid4().hex[:10]}"
    args = dict(dsn=postgres.dsn, table=table, checkpoint=str(tmp_path / "ck"), semantic=semantic,
                num_splits=2, rows_per_split=60, max_rows=30)  # 120 rows: 4 micro-batches
    for batch, point in enumerate(points, start=1):
        crashed = driver.run(JOB, args, fault=f"{point}:kill", once_marker=str(tmp_path / f"fired-{batch}"),
                             env={"SPARKLINK_FAULT_BATCH": str(batch)})
        assert crashed.killed, f"{point}: {crashed.output}"
        if point == "postgres.after_prepare":
            with postgres.connect() as conn:  # the crash left prepared transactions holding locks
                assert conn.execute("SELECT count(*) FROM pg_prepared_xacts").fetchone()[0] >= 1
    finished = driver.run(JOB, args)
    assert finished.ok, finished.output
    _check(postgres, table, rows=120)


# writer.after_write failing on the first attempt is run for every semantic in tests/conformance
RETRY_CASES = [("two-phase", "postgres.after_prepare")]


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
