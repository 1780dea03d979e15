"""The end of input through Spark Connect (the issue's first report): an ``availableNow`` JSON
stream from the file source into ``sparklink.files`` with compaction (row format: the ``default`` rolling policy carries in-progress
files across micro-batches) makes every committed row visible to Spark's own reader when the
query ends, without calling ``finish``, in both kinds of session (under Connect the end of input
runs on the server's driver; ``sparklink.files.finish`` from a Connect session is called in
test_connect_session.py)."""

from __future__ import annotations

import json

import pytest

from sparklink.spark import end_of_input


@pytest.fixture
def end_of_input_session(any_spark):
    """``any_spark`` with the automatic end of input (the classic test session has it off)."""
    if type(any_spark).__module__.startswith("pyspark.sql.connect"):
        yield any_spark  # registered by the harness as a user would: end of input on
        return
    with end_of_input.listening(any_spark):
        yield any_spark


def test_available_now_json_stream_is_all_visible_when_it_ends(end_of_input_session, tmp_path):
    spark = end_of_input_session
    source, out = tmp_path / "in", tmp_path / "out"
    source.mkdir()
    for n in range(3):
        (source / f"f{n}.json").write_text("".join(json.dumps({"id": n * 100 + i}) + "\n" for i in range(100)))
    (spark.readStream.format("sparklink.files").option("path", str(source)).option("format", "json")
     .option("maxFilesPerTrigger", 1).schema("id long").load()
     .writeStream.format("sparklink.files").option("path", str(out)).option("format", "json")
     .option("compaction.everyNCheckpoints", "2")
     .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start().awaitTermination())
    assert sorted(r.id for r in spark.read.schema("id long").json(str(out)).collect()) == list(range(300))
    assert spark.read.format("sparklink.files").option("path", str(out)).option("format", "json") \
        .schema("id long").load().count() == 300
