"""The Cassandra family's one real SIGKILL sequence: one driver runs a query per semantic, each
into its own table; its whole process group is SIGKILLed once both sinks' commit logs hold
their second micro-batch (observable progress, no timer), while both are held in their third
(the job's tasks wait at its first row for a file the test never makes: neither query can run
ahead of the other to its end, whatever their pace), the queries are restarted from their
checkpoints in the test's session, and the tables are read back with the Python driver.

* upsert: a generated changelog (writeMode=upsert: inserts, updates, deletes, keys repeated
  within a micro-batch, sequence values out of order, the sequence as write timestamp): the
  table equals a plain dict replaying the changelog (a change applies when its sequence value
  is above the key's last one, a delete's included);
* write-ahead: every id on exactly one row although the key is ``(id, nonce)`` and ``nonce``
  is ``uuid()``, computed anew when Spark recomputes a batch: no batch was applied twice and
  none from two computations.

Every fault point of both semantics is also crashed at by simulation (test_conformance.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sparklink.testing import DriverProcess, logged_batches
from tests.cassandra.conftest import KEYSPACE
from tests.cassandra.jobs import changelog_change, stream_keys_with_both_semantics

JOB = "tests.cassandra.jobs:stream_keys_with_both_semantics"
ROWS, PER_BATCH = 120, 24  # 5 micro-batches per query: both are still running at the kill
COLUMNS = {"upsert": "k bigint PRIMARY KEY, seq bigint, v text",
           "write-ahead": "id bigint, nonce text, PRIMARY KEY ((id), nonce)"}


def changelog_final_state() -> dict[int, tuple[int, str]]:
    """The changelog replayed on a dict, micro-batch by micro-batch: the greatest sequence value
    per key in a batch; it applies when above the key's last one (a delete's too: Cassandra
    keeps the delete as a tombstone with its timestamp)."""
    last: dict[int, tuple[int, str, str]] = {}
    for start in range(0, ROWS, PER_BATCH):
        batch: dict[int, tuple[int, str, str]] = {}
        for i in range(start, start + PER_BATCH):
            k, seq, op, v = changelog_change(i, ROWS)
            if k not in batch or seq > batch[k][0]:
                batch[k] = (seq, op, v)
        for k, change in batch.items():
            if k not in last or change[0] > last[k][0]:
                last[k] = change
    return {k: (seq, v) for k, (seq, op, v) in last.items() if op != "d"}


@pytest.mark.slow
def test_driver_sigkilled_on_commit_log_progress_then_restarted(driver, spark, cassandra, cassandra_session,
                                                                new_table, tmp_path):
    tables = {semantic: new_table(columns, prefix=f"kill_{semantic.replace('-', '_')}")
              for semantic, columns in COLUMNS.items()}
    args = dict(connection=cassandra.options(), keyspace=KEYSPACE, tables=tables, checkpoint=str(tmp_path / "ck"),
                rows=ROWS, per_batch=PER_BATCH)
    held = dict(args, hold_batch=2, gate=str(tmp_path / "never"))
    commits = {semantic: Path(f"{args['checkpoint']}-{semantic}") / "sparklink" / "commits" for semantic in tables}
    # four task slots: a held query's tasks keep theirs (two of write-ahead's, one of upsert's), and the other
    # query still needs one to reach its own held micro-batch
    process: DriverProcess = driver.start(JOB, held, master="local[4]")
    process.kill_when(lambda: all(logged_batches(log) >= 2 for log in commits.values()),
                      what="micro-batch 1 in both sinks' commit logs", timeout=400)
    batches = ROWS // PER_BATCH
    assert all(logged_batches(log) < batches for log in commits.values()), \
        f"a query ended before the kill: {[logged_batches(log) for log in commits.values()]} of {batches}"
    stream_keys_with_both_semantics(spark, **args)
    assert [logged_batches(log) for log in commits.values()] == [batches, batches]
    found = {r.k: (r.seq, r.v) for r in cassandra_session.execute(f"SELECT k, seq, v FROM {KEYSPACE}.{tables['upsert']}")}
    assert found == changelog_final_state()
    ids = sorted(r.id for r in cassandra_session.execute(f"SELECT id FROM {KEYSPACE}.{tables['write-ahead']}"))
    assert ids == list(range(ROWS)), f"{len(ids)} rows, {len(set(ids))} distinct ids; expected {ROWS} once each"
    assert not list(Path(f"{args['checkpoint']}-write-ahead", "sparklink", "wal").glob("*.arrow"))
