"""Idempotent ``df.write``: options ``txnAppId`` / ``txnVersion`` on the file sink and PostgreSQL
(:mod:`sparklink.sink.txn`). A write whose pair is committed is skipped; a ``foreachBatch``
query writing both sinks, SIGKILLed once and restarted, leaves every row once in each."""

from __future__ import annotations

import uuid

import pyarrow.dataset as ds
import pytest

from sparklink.errors import ConfigError
from sparklink.sink.txn import Txn, split_txn_options
from tests.sink.jobs_txn import foreach_batch_two_sinks

JOB = "tests.sink.jobs_txn:foreach_batch_two_sinks"


def test_txn_options_parsed_and_refused():
    txn, rest = split_txn_options({"path": "/x", "TXNAPPID": "app", "txnVersion": "7"})
    assert txn == Txn(app_id="app", version=7) and rest == {"path": "/x"}
    assert txn.job_id == "txn-app-7"
    assert Txn(app_id="my app/1", version=0).job_id.startswith("txn-") and " " not in Txn(app_id="a b", version=0).job_id
    assert split_txn_options({"path": "/x"}) == (None, {"path": "/x"})
    with pytest.raises(ConfigError, match="option 'txnVersion': is required with option 'txnAppId'"):
        split_txn_options({"txnAppId": "app"})
    with pytest.raises(ConfigError, match="option 'txnVersion': 'x' is not a whole number"):
        split_txn_options({"txnAppId": "app", "txnVersion": "x"})
    with pytest.raises(ConfigError, match="option 'txnVersion': '-1' is negative"):
        split_txn_options({"txnAppId": "app", "txnVersion": "-1"})


def _files_write(spark, out, start, end, version):
    (spark.range(start, end, numPartitions=2).write.format("sparklink.files").mode("append").option("path", out)
     .option("format", "parquet").option("bucketAssigner", "basepath")
     .option("txnAppId", "app").option("txnVersion", version).save())


def test_files_write_with_a_committed_pair_is_skipped(spark, tmp_path):
    out = str(tmp_path / "out")
    _files_write(spark, out, 0, 10, 0)
    _files_write(spark, out, 100, 110, 0)  # a replay of version 0 (other rows, to see it skipped)
    _files_write(spark, out, 10, 20, 1)
    assert sorted(ds.dataset(out, format="parquet").to_table().column("id").to_pylist()) == list(range(20))
    assert sorted(p.name for p in (tmp_path / "out" / "_sparklink" / "commits").glob("job-*")) == \
        ["job-txn-app-0.json", "job-txn-app-1.json"]


def test_txn_refused_on_write_stream(spark, tmp_path):
    query = None
    with pytest.raises(Exception, match="txnAppId.*not to df.writeStream"):
        query = (spark.readStream.format("sparklink.sequence").option("numSplits", 1).option("rowsPerSplit", 2)
                 .load().writeStream.format("sparklink.files").option("path", str(tmp_path / "out"))
                 .option("checkpointLocation", str(tmp_path / "ck")).option("txnAppId", "a")
                 .option("txnVersion", 0).trigger(availableNow=True).start())
        query.awaitTermination()


def _pg_write(spark, postgres, table, rows, value, version, **options):
    writer = (spark.range(0, rows, numPartitions=2).selectExpr("id", f"'{value}' AS v").write
              .format("sparklink.postgres").mode("append").option("dsn", postgres.dsn).option("table", table)
              .option("txnAppId", "app").option("txnVersion", version))
    for key, option in options.items():
        writer = writer.option(key, option)
    writer.save()


def test_postgres_semantics_skip_a_committed_pair(spark, postgres, tmp_path):
    upsert = f"t_{uuid.uuid4().hex[:10]}"
    _pg_write(spark, postgres, upsert, 10, "first", 0, keyColumns="id")
    _pg_write(spark, postgres, upsert, 10, "replay", 0, keyColumns="id")  # skipped: values stay 'first'
    logged = {semantic: f"t_{uuid.uuid4().hex[:10]}" for semantic in ("write-ahead", "two-phase")}
    for semantic, table in logged.items():  # the pair names the job's entry in the commit log
        for _ in range(2):
            _pg_write(spark, postgres, table, 10, "x", 3, semantic=semantic,
                      checkpointLocation=str(tmp_path / f"ck-{semantic}"))
    with postgres.connect() as conn:
        assert conn.execute(f'SELECT DISTINCT v FROM "{upsert}"').fetchall() == [("first",)]
        assert conn.execute("SELECT app_id, version FROM sparklink_txns WHERE target LIKE %s",
                            (f"%{upsert}%",)).fetchall() == [("app", 0)]
        for table in logged.values():
            assert conn.execute(f'SELECT count(*), count(DISTINCT id) FROM "{table}"').fetchone() == (10, 10)
        assert conn.execute("SELECT count(*) FROM pg_prepared_xacts").fetchone()[0] == 0


@pytest.mark.slow
def test_foreach_batch_into_two_sinks_killed_and_restarted(driver, spark, postgres, tmp_path):
    """SIGKILL once the file sink committed the write of micro-batch 1 (its commit log entry
    ``job-txn-two-sinks-1``), whatever the PostgreSQL write of that micro-batch had reached;
    the restart replays micro-batch 1 in foreachBatch, and each sink skips what it committed."""
    table = f"t_{uuid.uuid4().hex[:10]}"
    args = dict(dsn=postgres.dsn, table=table, out=str(tmp_path / "out"), checkpoint=str(tmp_path / "ck"),
                rows=120, per_trigger=30)
    marker = tmp_path / "out" / "_sparklink" / "commits" / "job-txn-two-sinks-1.json"
    process = driver.start(JOB, args)
    process.kill_when(marker.exists, what="the file sink's commit of micro-batch 1")
    # Spark's own commit of micro-batch 1 comes after both writes: almost always missing here,
    # so the restart replays micro-batch 1 (printed; exactly-once is checked either way)
    print(f"micro-batch 1 replayed by the restart: {not (tmp_path / 'ck' / 'commits' / '1').exists()}")
    foreach_batch_two_sinks(spark, **args)
    files_ids = sorted(ds.dataset(args["out"], format="parquet").to_table().column("id").to_pylist())
    assert files_ids == list(range(120)), f"file sink: {len(files_ids)} rows, {len(set(files_ids))} distinct"
    with postgres.connect() as conn:
        pg_ids = [r[0] for r in conn.execute(f'SELECT id FROM "{table}" ORDER BY id').fetchall()]
    assert pg_ids == list(range(120)), f"PostgreSQL: {len(pg_ids)} rows, {len(set(pg_ids))} distinct"
