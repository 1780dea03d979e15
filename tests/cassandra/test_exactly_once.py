"""One real crash per semantic: the driver's whole process group is SIGKILLed once the sink's
commit log holds its second micro-batch (observable progress, no timer), the query is
restarted from its checkpoint in the test's session, and the table is read back with the
Python driver.

* upsert: every key once, with the value of the last micro-batch (a replay rewrote the same
  keys, and no older value came back after a newer one);
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
from tests.cassandra.jobs import stream_keys

JOB = "tests.cassandra.jobs:stream_keys"
ROWS, PER_BATCH = 120, 30  # 4 micro-batches
COLUMNS = {"upsert": "key bigint PRIMARY KEY, value bigint",
           "write-ahead": "id bigint, nonce text, PRIMARY KEY ((id), nonce)"}


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
        found = {r.key: r.value for r in cassandra_session.execute(f"SELECT key, value FROM {KEYSPACE}.{table}")}
        last = ROWS - PER_BATCH
        assert found == {k: last + k for k in range(PER_BATCH)}
    else:
        ids = sorted(r.id for r in cassandra_session.execute(f"SELECT id FROM {KEYSPACE}.{table}"))
        assert ids == list(range(ROWS)), f"{len(ids)} rows, {len(set(ids))} distinct ids; expected {ROWS} once each"
    assert not list((tmp_path / "ck" / "sparklink" / "wal").glob("*.arrow"))
