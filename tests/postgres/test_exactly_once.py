"""Exactly-once under crashes: SIGKILL of the driver's process group at the PostgreSQL sinks'
own steps of the commit protocols; after a restart (in the test's own session) every id is in
the table once and no prepared transaction is left.

The driver job first streams a changelog (writeMode=upsert: inserts, updates, deletes, keys
repeated within a micro-batch, sequence values out of order) of 2 micro-batches, then the
sequence: the first kill (batch 1) lands in the changelog query, the second (batch 2) in the
sequence query. The changelog table, read with psycopg, must equal the final state of a plain
Python dict replaying the changelog batch by batch.

Every fault point of every semantic (the SDK's and ``postgres.*``) is also crashed at by
simulation, and tasks fail on their first attempt (``writer.after_write``, and
``postgres.after_prepare`` for two-phase), in tests/conformance/test_sink_conformance.py, which
also runs the upsert semantic's real SIGKILL sequence."""

from __future__ import annotations

import uuid

import pytest

from tests.postgres.jobs import (
    CHANGELOG_PER_BATCH,
    CHANGELOG_ROWS,
    changelog_change,
    stream_changelog_then_sequence,
)

JOB = "tests.postgres.jobs:stream_changelog_then_sequence"

# The PostgreSQL-specific points, one per micro-batch 1, 2, ...: batch 1 of the changelog query,
# then batch 2 of the sequence query (the changelog has 2 micro-batches).
# One sequence for the family (the suite's budget): two-phase, whose points leave prepared
# transactions to roll forward or back. write-ahead is killed for real inside a commit in
# tests/sink/test_txn_writes.py (foreachBatch into the file sink and write-ahead), and its
# postgres.before_wal_commit is crashed at by simulation (conformance TestPostgresWriteAhead, with
# writeMode=upsert too).
KILL_SEQUENCES = [
    ("two-phase", ["postgres.after_prepare", "postgres.between_commit_prepared"]),
]


def changelog_final_state() -> dict[int, tuple[int, str]]:
    """The changelog replayed on a dict, micro-batch by micro-batch, as the contract says: the
    greatest sequence value per key in a batch applies, unless the stored row's is greater; a
    delete removes the key."""
    state: dict[int, tuple[int, str]] = {}
    for start in range(0, CHANGELOG_ROWS, CHANGELOG_PER_BATCH):
        last: dict[int, tuple[int, str, str]] = {}
        for i in range(start, start + CHANGELOG_PER_BATCH):
            k, seq, op, v = changelog_change(i)
            if k not in last or seq > last[k][0]:
                last[k] = (seq, op, v)
        for k, (seq, op, v) in last.items():
            if k in state and state[k][0] > seq:
                continue
            if op == "d":
                state.pop(k, None)
            else:
                state[k] = (seq, v)
    return state


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
    args = dict(dsn=postgres.dsn, table=table, changelog_table=f"{table}_cl", checkpoint=str(tmp_path / "ck"),
                semantic=semantic, num_splits=2, rows_per_split=60, max_rows=30)  # 120 rows: 4 micro-batches
    for batch, point in enumerate(points, start=1):
        crashed = driver.run(JOB, args, fault=f"{point}:kill", once_marker=str(tmp_path / f"fired-{batch}"),
                             env={"SPARKLINK_FAULT_BATCH": str(batch)})
        assert crashed.killed, f"{point}: {crashed.output}"
        if point == "postgres.after_prepare":
            with postgres.connect() as conn:  # the crash left prepared transactions holding locks
                assert conn.execute("SELECT count(*) FROM pg_prepared_xacts").fetchone()[0] >= 1
    stream_changelog_then_sequence(spark, **args)
    _check(postgres, table, rows=120)
    with postgres.connect() as conn:
        found = {k: (seq, v) for k, seq, v in conn.execute(f'SELECT k, seq, v FROM "{table}_cl"').fetchall()}
    expected = changelog_final_state()
    assert found == expected, f"differs at keys {sorted(k for k in expected.keys() | found.keys() if found.get(k) != expected.get(k))}"
