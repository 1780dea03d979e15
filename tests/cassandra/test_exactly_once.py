"""One real crash per semantic: the driver's whole process group is SIGKILLed once the sink's
commit log holds its second micro-batch (observable progress, no timer), the query is
restarted from its checkpoint in the test's session, and the table is read back with the
Python driver.

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
from tests.cassandra.jobs import changelog_change, stream_keys

JOB = "tests.cassandra.jobs:stream_keys"
ROWS, PER_BATCH = 120, 30  # 4 micro-batches
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
@pytest.mark.parametrize("semantic", ["upsert", "write-ahead"])
def test_driver_sigkilled_on_commit_log_progress_then_restarted(driver, spark, cassandra, cassandra_session,
                                                                new_table, tmp_path, semantic):
    table = new_table(COLUMNS[semantic], prefix=f"kill_{semantic.replace('-', '_')}")
    args = dict(connection=cassandra.options(), keyspace=KEYSPACE, table=table,
                checkpoint=str(tmp_path / "ck"), semantic=semantic, rows=ROWS, per_batch=PER_BATCH)
    commits = Path(args["checkpoint"]) / "sparklink" / "commits"
    process: DriverProcess = driver.start(JOB, args)
    process.kill_when(lambda: logged_batches(commits) >= 2, what="micro-batch 1 in the sink's commit log",
                      timeout=400)
    stream_keys(spark, **args)
    assert logged_batches(commits) == ROWS // PER_BATCH
    if semantic == "upsert":
        found = {r.k: (r.seq, r.v) for r in cassandra_session.execute(f"SELECT k, seq, v FROM {KEYSPACE}.{table}")}
        assert found == changelog_final_state()
    else:
        ids = sorted(r.id for r in cassandra_session.execute(f"SELECT id FROM {KEYSPACE}.{table}"))
        assert ids == list(range(ROWS)), f"{len(ids)} rows, {len(set(ids))} distinct ids; expected {ROWS} once each"
    assert not list((tmp_path / "ck" / "sparklink" / "wal").glob("*.arrow"))
