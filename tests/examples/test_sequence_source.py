"""The example sequence source: enumerator admission control, and reads through Spark."""

import pyarrow.dataset as ds
import pytest

from sparklink.errors import ConfigError
from sparklink.examples.sequence_source import SequenceEnumerator, SequenceSource
from sparklink.source import READ_ALL, ReadLimit


def test_enumerator_admits_at_most_max_rows_and_plans_exact_ranges():
    enumerator = SequenceEnumerator(num_splits=3, rows_per_split=10, rows_per_second=None)
    start = enumerator.initial_offset()
    end = enumerator.latest_offset(start, ReadLimit(max_rows=7))
    assert sum(end["positions"]) == 7
    splits = enumerator.plan_splits(start, end)
    assert sum(s.state["to"] - s.state["from"] for s in splits) == 7
    assert enumerator.latest_offset(end, READ_ALL) == {"positions": [10, 10, 10]}
    target = {"positions": [2, 2, 2]}
    assert enumerator.latest_offset(start, ReadLimit(until=target)) == target


def test_batch_read_yields_every_id_once(spark):
    df = spark.read.format("sparklink.sequence").option("numSplits", 4).option("rowsPerSplit", 250).load()
    ids = [row.id for row in df.select("id").collect()]
    assert sorted(ids) == list(range(1000))
    assert df.rdd.getNumPartitions() == 4


@pytest.mark.parametrize(("max_rows", "expected_batches"), [(100, 6), (None, 1)], ids=["maxRowsPerTrigger", "unlimited"])
def test_stream_with_read_limit_and_available_now(spark, tmp_path, max_rows, expected_batches):
    reader = spark.readStream.format("sparklink.sequence").option("numSplits", 3).option("rowsPerSplit", 200)
    if max_rows:
        reader = reader.option("maxRowsPerTrigger", max_rows)
    query = (reader.load().writeStream.format("sparklink.directory").option("path", str(tmp_path / "out"))
             .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
    query.awaitTermination()
    batches = [p for p in query.recentProgress if p["numInputRows"] > 0]
    assert len(batches) == expected_batches
    assert all(p["numInputRows"] <= (max_rows or 600) for p in batches)
    ids = ds.dataset(str(tmp_path / "out"), format="parquet").to_table().column("id").to_pylist()
    assert sorted(ids) == list(range(600))


@pytest.mark.parametrize(("options", "message"), [
    ({"numSplits": "0"}, "option 'numSplits': must be at least 1"),
    ({"rowsPerSplit": "many"}, "option 'rowsPerSplit': 'many' is not an integer"),
    ({"numSplit": "2"}, r"option 'numSplit': unknown option \(did you mean 'numSplits'\?\) \(accepted: .*numSplits"),
], ids=["zero-splits", "not-a-number", "typo"])
def test_bad_options_name_the_option(options, message):
    with pytest.raises(ConfigError, match=message):
        SequenceSource(options)


def test_bad_option_fails_the_query_at_start(spark):
    with pytest.raises(Exception, match="option 'numSplits': must be at least 1"):
        spark.read.format("sparklink.sequence").option("numSplits", 0).load().collect()
