"""Issue 35's Iceberg cases: what the sink writes must be what the table says, read back by
pyiceberg's own scan. Double partition values (NaN, 0.0 / -0.0), a column renamed by pyiceberg
while a micro-batch was logged but not committed, option keys checked against the option
table, and ``txnAppId`` / ``txnVersion`` on ``df.write`` (also inside ``foreachBatch``)."""

from __future__ import annotations

import math
import os

import pyarrow as pa
import pytest
from pyspark.sql.types import DoubleType, LongType, StructField, StructType

from sparklink.errors import CommitError, ConfigError, FaultInjected
from sparklink.faults import ENV_FAULT
from sparklink.iceberg.identity import SUMMARY_TXN_APP_ID, SUMMARY_TXN_VERSION
from sparklink.iceberg.sink import IcebergSink
from sparklink.sink import WriterContext
from sparklink.spark.sink_adapter import SinkCommitMessage, SinkStreamWriter
from sparklink.testing.conformance import SEQUENCE_SCHEMA
from sparklink.testing.faults import ENV_BATCH
from tests.iceberg.iceberg_readers import catalog_options, load_table, scan_ids, sparklink_snapshots
from tests.iceberg.test_iceberg_sink import ids_of, micro_batch


@pytest.fixture
def options(tmp_path):
    return catalog_options(tmp_path / "iceberg")


def _catalog(options: dict):
    from pyiceberg.catalog import load_catalog

    return load_catalog("default", **{k[8:]: v for k, v in options.items() if k.startswith("catalog.")})


def arrow_micro_batch(options: dict, checkpoint, batch_id: int, schema: StructType, data: pa.RecordBatch) -> None:
    """One micro-batch of ``data`` in one task, driven as Spark's adapter drives it."""
    sink = IcebergSink(dict(options, checkpointLocation=str(checkpoint)), schema)
    stream_writer = SinkStreamWriter(sink, query_id="iceberg-test")
    sink.prepare_tasks()
    writer = sink.create_writer(WriterContext(partition_id=0, attempt_number=0, task_attempt_id=0,
                                              job_id=f"job-{batch_id}", batch_id=batch_id, query_id="iceberg-test"))
    writer.write_batch(data)
    writer.flush()
    message = SinkCommitMessage(partition_id=0, attempt_number=0, query_id="iceberg-test",
                                committables=writer.prepare_commit())
    writer.close()
    stream_writer.commit([message], batch_id)


def test_double_partition_values_keep_nan_and_tell_zero_from_minus_zero(options, tmp_path):
    """Issue 35 item 5: 0.0, -0.0, NaN, 1.5 and null into a table partitioned by a DOUBLE
    column (before: the NaN row dropped, the zeros written twice): pyiceberg reads the 5 rows,
    each file's partition is the exact value (0.0 is not -0.0, NaN is not null), and filters on
    NaN, null and 1.5 find their row."""
    from pyiceberg.expressions import IsNaN, IsNull
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import IdentityTransform
    from pyiceberg.types import DoubleType as IcebergDouble
    from pyiceberg.types import LongType as IcebergLong
    from pyiceberg.types import NestedField

    catalog = _catalog(options)
    catalog.create_namespace("db")
    catalog.create_table("db.events", schema=Schema(NestedField(1, "id", IcebergLong()), NestedField(2, "d", IcebergDouble())),
                         partition_spec=PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "d")))
    schema = StructType([StructField("id", LongType()), StructField("d", DoubleType())])
    values = [0.0, -0.0, math.nan, 1.5, None]
    data = pa.RecordBatch.from_pydict({"id": pa.array(range(5), pa.int64()), "d": pa.array(values, pa.float64())})
    arrow_micro_batch(options, tmp_path / "ck", 0, schema, data)
    table = load_table(options)
    rows = sorted(table.scan().to_arrow().to_pylist(), key=lambda r: r["id"])
    assert [r["id"] for r in rows] == [0, 1, 2, 3, 4]
    assert [math.copysign(1, r["d"]) for r in rows[:2]] == [1.0, -1.0] and math.isnan(rows[2]["d"])
    partitions = {repr(f["partition"]["d"]) for f in table.inspect.files().to_pylist()}
    assert partitions == {"0.0", "-0.0", "nan", "1.5", "None"}
    assert table.scan(row_filter=IsNaN("d")).to_arrow().column("id").to_pylist() == [2]
    assert table.scan(row_filter=IsNull("d")).to_arrow().column("id").to_pylist() == [4]
    assert table.scan(row_filter="d == 1.5").to_arrow().column("id").to_pylist() == [3]


def test_a_column_renamed_while_a_batch_is_logged_is_served(options, tmp_path, monkeypatch):
    """Issue 35 item 7: batch 1's files are written and its commit-log entry is ``committing``
    when the driver dies; pyiceberg then renames ``split`` to ``part``. The restart rolls batch 1
    forward (its files' ``split`` matched through the table's name mapping) and batch 2, whose
    input still calls the column ``split``, fills ``part``: every id once, no value lost."""
    checkpoint = tmp_path / "ck"
    micro_batch(options, checkpoint, 0, ids_of(0))
    with monkeypatch.context() as armed:
        armed.setenv(ENV_FAULT, "sink.after_log:raise")
        armed.setenv(ENV_BATCH, "1")
        with pytest.raises(FaultInjected):
            micro_batch(options, checkpoint, 1, ids_of(1))
    with load_table(options).update_schema() as update:
        update.rename_column("split", "part")
    micro_batch(options, checkpoint, 1, ids_of(1))  # the replay: the logged entry is rolled forward
    micro_batch(options, checkpoint, 2, ids_of(2))
    rows = load_table(options).scan().to_arrow().to_pylist()
    assert sorted(r["id"] for r in rows) == list(range(30))
    assert all(r["part"] == r["id"] % 2 for r in rows)  # micro_batch: task p writes split = p
    assert [s["sparklink.batch-id"] for s in sparklink_snapshots(options)] == ["0", "1", "2"]


def test_a_dropped_column_is_refused_naming_it(options, tmp_path):
    micro_batch(options, tmp_path / "ck", 0, ids_of(0))
    with load_table(options).update_schema() as update:
        update.delete_column("split")
    with pytest.raises(ConfigError, match="column 'split' of the input is not a column of db.events.*add it"):
        micro_batch(options, tmp_path / "ck", 1, ids_of(1))
    assert scan_ids(options) == list(range(10))


def test_a_logged_file_with_a_dropped_column_fails_naming_the_way_out(options, tmp_path, monkeypatch):
    micro_batch(options, tmp_path / "ck", 0, ids_of(0))
    with monkeypatch.context() as armed:
        armed.setenv(ENV_FAULT, "sink.after_log:raise")
        armed.setenv(ENV_BATCH, "1")
        with pytest.raises(FaultInjected):
            micro_batch(options, tmp_path / "ck", 1, ids_of(1))
    with load_table(options).update_schema() as update:
        update.delete_column("split")
    with pytest.raises(CommitError, match="has no column 'split' any more.*add the column back"):
        SinkStreamWriter(IcebergSink(dict(options, checkpointLocation=str(tmp_path / "ck")), SEQUENCE_SCHEMA),
                         query_id="iceberg-test")
    assert scan_ids(options) == list(range(10))


@pytest.mark.parametrize("key, message", [
    ("brnach", "'brnach': unknown option \\(did you mean 'branch'\\?\\)"),
    ("appid", None),  # Spark lower-cases keys: accepted
    ("tabel", "unknown option \\(did you mean 'table'\\?\\)"),
    ("txnAppId", "'txnVersion': is required with option 'txnAppId'"),
], ids=["misspelt-branch", "lower-cased", "misspelt-table", "txn-half"])
def test_every_option_goes_through_the_option_table(options, key, message):
    given = dict(options, **{key: "dev"})
    if message is None:
        IcebergSink(given, SEQUENCE_SCHEMA)
        IcebergSink.validate(given, SEQUENCE_SCHEMA)
        return
    with pytest.raises(ConfigError, match=message):
        IcebergSink(given, SEQUENCE_SCHEMA)
    with pytest.raises(ConfigError, match=message):
        IcebergSink.validate(given, SEQUENCE_SCHEMA)


def test_txn_options_on_a_stream_are_refused(options, tmp_path):
    with pytest.raises(ConfigError, match="txnAppId.*not to df.writeStream"):
        micro_batch(dict(options, txnAppId="app", txnVersion="0"), tmp_path / "ck", 0, ids_of(0))


def _write(frame, options: dict, **extra) -> None:
    writer = frame.write.format("sparklink.iceberg").mode("append")
    for key, value in {**options, **extra}.items():
        writer = writer.option(key, str(value))
    writer.save()


def test_df_write_with_txn_options_commits_each_pair_once(options, spark):
    """Deliver 4: the pair is in the snapshot summary; a write of a pair already in the branch's
    ancestry is skipped (its tasks write nothing), another version is committed."""
    for version, start in ((0, 0), (0, 100), (1, 200)):
        _write(spark.range(start, start + 20), options, txnAppId="nightly", txnVersion=version)
    assert scan_ids(options) == list(range(20)) + list(range(200, 220))
    summaries = sparklink_snapshots(options)
    assert [(s[SUMMARY_TXN_APP_ID], s[SUMMARY_TXN_VERSION]) for s in summaries] == [("nightly", "0"), ("nightly", "1")]
    data = load_table(options).location()[len("file://"):] + "/data"
    assert sum(len(files) for _, _, files in os.walk(data)) == \
        len(load_table(options).inspect.files())  # the skipped writes left no file behind


def test_the_quick_start_of_docs_iceberg_md_runs_as_written_with_timestamp_columns(spark, tmp_path):
    """Issue 35 item 4: the first code block of docs/iceberg.md, run as written (its /data paths
    moved under tmp_path), on inputs with a TIMESTAMP and a TIMESTAMP_NTZ column: the stream
    creates the table (timestamptz and timestamp), the batch write appends to it; pyiceberg reads
    the same instants."""
    import datetime as dt
    import re
    from pathlib import Path

    import sparklink

    text = (Path(__file__).parents[2] / "docs" / "iceberg.md").read_text()
    code = re.search(r"```python\n(.*?)```", text, re.S).group(1).replace("/data/", f"{tmp_path}/data/")
    (tmp_path / "data" / "warehouse").mkdir(parents=True)
    landing = tmp_path / "landing"
    landing.mkdir()
    (landing / "a.json").write_text('{"id": 1, "at": "2026-11-25T10:00:00Z", "local": "2026-11-25T10:00:00"}\n')
    events = spark.readStream.format("json").schema("id LONG, at TIMESTAMP, local TIMESTAMP_NTZ").load(str(landing))
    batch = spark.sql("SELECT 2L AS id, TIMESTAMP'2026-11-26 12:30:00 UTC' AS at, "
                      "TIMESTAMP_NTZ'2026-11-26 12:30:00' AS local")
    before = {query.id for query in spark.streams.active}
    exec(compile(code, "docs/iceberg.md", "exec"), {"sparklink": sparklink, "spark": spark, "events": events,
                                                    "batch": batch})
    for query in spark.streams.active:
        if query.id not in before:
            query.processAllAvailable()
            query.stop()
    options = {"table": "db.events", "catalog.type": "sql", "catalog.uri": f"sqlite:///{tmp_path}/data/catalog.db"}
    table = load_table(options)
    assert [str(f.field_type) for f in table.schema().fields] == ["long", "timestamptz", "timestamp"]
    rows = sorted(table.scan().to_arrow().to_pylist(), key=lambda r: r["id"])
    utc = dt.timezone.utc
    assert rows == [{"id": 1, "at": dt.datetime(2026, 11, 25, 10, tzinfo=utc), "local": dt.datetime(2026, 11, 25, 10)},
                    {"id": 2, "at": dt.datetime(2026, 11, 26, 12, 30, tzinfo=utc),
                     "local": dt.datetime(2026, 11, 26, 12, 30)}]
