"""Exactly-once under crashes: SIGKILL of the driver's process group at the PostgreSQL sinks'
own steps of the commit protocols; after a restart (in the test's own session) every id is in
the table once and no prepared transaction is left.

Every fault point of every semantic (the SDK's and ``postgres.*``) is also crashed at by
simulation, and tasks fail on their first attempt (``writer.after_write``, and
``postgres.after_prepare`` for two-phase), in tests/conformance/test_sink_conformance.py, which
also runs the upsert semantic's real SIGKILL sequence."""

from __future__ import annotations

import uuid

import pytest

from tests.postgres.jobs import stream_sequence

JOB = "tests.postgres.jobs:stream_sequence"

# The PostgreSQL-specific points, one query per semantic killed at one point per micro-batch.
KILL_SEQUENCES = [
    ("two-phase", ["postgres.after_prepare", "postgres.between_commit_prepared"]),
    ("write-ahead", ["postgres.before_wal_commit"]),
]


def _check(postgres, table: str, rows: int) -> None:
    with postgres.connect() as conn:
        ids = [r[0] for r in conn.execute(f'SELECT id FROM "{table}" ORDER BY id').fetchall()]
        leftovers = conn.execute("SELECT gid FROM pg_prepared_xacts").fetchall()
    assert ids == list(range(rows)), f"missing {sorted(set(range(rows)) - set(ids))}, duplicated/extra " \
                                     f"{len(ids) - len(set(ids))}"
    assert leftovers == []


@pytest.mark.slow
@pytest.mark.parametrize(("semantic", "points"), KILL_SEQUENCES, ids=[s for s, _ in KILL_SEQUENCES])
def test_driver_killed_then_restarted_writes_every_row_once(driver, postgres, tmp_path, spark, semantic, points):
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
    stream_sequence(spark, **args)
    _check(postgres, table, rows=120)
