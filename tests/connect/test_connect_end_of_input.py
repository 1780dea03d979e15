"""The end of input through Spark Connect (the issue's first report): an ``availableNow`` JSON
stream from the file source into ``sparklink.files`` with compaction (row format: the ``default``
rolling policy carries in-progress files across micro-batches) makes every committed row visible
to Spark's own reader when the query ends, without calling ``finish`` (under Connect the end of
input runs on the server's driver; ``sparklink.files.finish`` from a Connect session is called in
test_connect_session.py); ``spark.stop()`` with a query active leaves no committed row hidden.

The pipeline runs in both kinds of session; the other cases in a classic session are the file sink's own tests
(tests/files/test_file_sink_nothing_unseen.py: JSON with carried files and Parquet with held
files, read right after ``awaitTermination()``, and ``spark.stop()`` with a query active;
tests/files/test_file_sink_end_of_input.py)."""

from __future__ import annotations

import json
import time

import pytest

import sparklink
from sparklink.cli.main import main
from sparklink.spark import end_of_input, end_of_input_server
from sparklink.testing.drivers import logged_batches


@pytest.fixture(params=["classic", "connect"])
def end_of_input_session(request):
    """The issue's pipeline in both kinds of session: a Connect client (registered by the harness as
    a user would: end of input on), then the classic test session with the end of input listening."""
    if request.param == "connect":
        yield request.getfixturevalue("connect_spark")
        return
    classic = request.getfixturevalue("spark")
    with end_of_input.listening(classic):
        yield classic


def test_available_now_json_stream_is_all_visible_when_it_ends(end_of_input_session, tmp_path):
    """The same rows in both kinds of session, read by Spark's own JSON reader."""
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


def test_spark_stop_with_a_query_active_leaves_no_committed_row_hidden(connect_server, connect_spark, tmp_path,
                                                                      capsys, jvm_attributes_touched):
    """``spark.stop()`` of a Connect client while a query writes ``sparklink.files`` (row format:
    every micro-batch's file is carried, hidden until finished): the session's queries are
    stopped first, each running its end of input on the server, then the session is released.
    (PySpark's own Connect ``stop`` releases the session, and the server stops its queries with
    no end of input: the committed rows would stay hidden.) The stop is triggered by the sink's
    commit-log progress; every row of the committed micro-batches is visible to Spark's reader
    afterwards, and ``sparklink verify`` finds nothing hidden. No JVM attribute is asked of a
    Connect session on the way."""
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    session = ConnectSession.builder.remote(connect_server.url).create()  # its own: stop() releases it
    # what sparklink.register gives a Connect session, for the formats used here (register's warm-up of every
    # format is tested in test_connect_session.py, and costs a streaming query per format)
    used = {"sparklink.sequence", "sparklink.files"}
    for data_source in [*(c for c in sparklink.data_sources() if c.name() in used), *end_of_input_server.data_sources()]:
        session.dataSource.register(data_source)
    end_of_input.install(session)
    out, rows_per_batch = tmp_path / "out", 50
    commits = out / "_sparklink" / "commits"
    query = (session.readStream.format("sparklink.sequence").option("numSplits", 1).option("rowsPerSplit", 1_000_000)
             .option("maxRowsPerTrigger", rows_per_batch).load().selectExpr("id")
             .writeStream.format("sparklink.files").option("path", str(out)).option("format", "json")
             .option("bucketAssigner", "basepath").option("checkpointLocation", str(tmp_path / "ck")).start())
    deadline = time.monotonic() + 300
    while logged_batches(commits) < 2:
        assert query.isActive, f"the query ended: {query.exception()}\n{connect_server.log_tail()}"
        assert time.monotonic() < deadline, f"no second commit within 300 s\n{connect_server.log_tail()}"
        time.sleep(0.05)
    session.stop()
    committed = logged_batches(commits)  # final: the query was stopped before stop() returned
    ids = sorted(r.id for r in connect_spark.read.schema("id long").json(str(out)).collect())
    assert ids == list(range(rows_per_batch * committed)), f"{len(ids)} rows visible of {committed} batches"
    assert main(["verify", str(out), "--key", "id"]) == 0, capsys.readouterr().out
    assert jvm_attributes_touched == []  # a stream, its stop and end of input, the session's stop
