"""Compaction of pending files: both compactors and both triggers on Spark, with a plain reader
seeing every record exactly once.

Every compaction fault point (before_write, after_write, after_rename, after_remove) is crashed
at by simulation in tests/conformance/test_sink_conformance.py (TestFileSinkCompaction); the real
SIGKILL inside a compaction (after its file is renamed into place, before its inputs are
removed: the step where a reader could see a record twice) is
tests/files/test_file_sink_spark_readers.py's, with Spark's reader polling."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from tests.files.sink_readers import assert_exactly_once, hidden_files, read_ids, visible_files

JOB = "tests.files.jobs_sink:stream_to_files"


def _run(spark, tmp_path, options, rows, per_trigger):
    from tests.files.jobs_sink import stream_to_files

    stream_to_files(spark, out=str(tmp_path / "out"), checkpoint=str(tmp_path / "ck"), rows=rows,
                    per_trigger=per_trigger, options=options)


@pytest.mark.parametrize(("fmt", "extra"), [
    ("parquet", {"compression": "zstd"}),
    ("csv", {"header": "true", "rollingPolicy": "checkpoint"}),
], ids=["record-wise-parquet", "concat-csv"])
def test_compaction_every_n_checkpoints(spark, tmp_path, fmt, extra):
    options = {"format": fmt, "bucketAssigner": "basepath", "compaction.everyNCheckpoints": "3", **extra}
    _run(spark, tmp_path, options, rows=300, per_trigger=50)  # 6 batches x 2 tasks = 12 small files
    files = visible_files(tmp_path / "out")
    assert len(files) == 2 and all(f.name.startswith("part-c") for f in files)
    assert_exactly_once(tmp_path / "out", fmt, 300, header=fmt == "csv")
    if fmt == "csv":
        assert all(sum(line.startswith("id,") for line in f.read_text().splitlines()) == 1
                   for f in files)  # one header per compacted file
    else:  # the 6 inputs' rows are rewritten as one full row group, not one per input or batch
        assert all(pq.ParquetFile(f).metadata.num_row_groups == 1 for f in files)
    assert hidden_files(tmp_path / "out") == []


def test_compaction_size_threshold_and_held_state(spark, tmp_path):
    options = {"format": "json", "bucketAssigner": "basepath", "rollingPolicy": "checkpoint",
               "compaction.sizeThreshold": "1MB"}
    _run(spark, tmp_path, options, rows=200, per_trigger=50)
    assert visible_files(tmp_path / "out") == []  # below the threshold: held, hidden, in the committed state
    state_dir = tmp_path / "out" / "_sparklink" / "state"
    last = json.loads(sorted(state_dir.iterdir(), key=lambda p: int(p.stem))[-1].read_text())
    assert sum(f["rows"] for f in last["held"]) == 200 and last["heldSince"] == {"": 0}
    options["compaction.sizeThreshold"] = "2KB"
    _run(spark, tmp_path, options, rows=260, per_trigger=60)
    assert len(visible_files(tmp_path / "out")) == 1
    assert_exactly_once(tmp_path / "out", "json", 260)


def test_plain_reader_sees_no_duplicate_and_loses_nothing_while_a_query_compacts(spark, tmp_path):
    """A reader polls the output during a running, compacting query: every snapshot holds each
    record at most once, every visible file reads completely, and what was visible stays visible."""
    out = tmp_path / "out"

    def start(every_n: str, **trigger):
        return (spark.readStream.format("sparklink.sequence").option("numSplits", 2).option("rowsPerSplit", 400)
                .option("maxRowsPerTrigger", 40).load()
                .writeStream.format("sparklink.files").option("path", str(out)).option("format", "parquet")
                .option("bucketAssigner", "basepath").option("compaction.everyNCheckpoints", every_n)
                .option("checkpointLocation", str(tmp_path / "ck")).trigger(**trigger).start())

    query = start("2", processingTime="100 milliseconds")
    seen: set[int] = set()
    snapshots = 0
    try:
        # stop half-way (20 micro-batches in all) so the second run below has input left to commit
        while query.isActive and len(seen) < 400:
            ids = read_ids(out, "parquet") if out.exists() else []
            assert len(ids) == len(set(ids)), "a reader saw a record twice"
            assert seen <= set(ids), "a record that was visible disappeared"
            seen = set(ids)
            snapshots += 1
        assert query.exception() is None
    finally:
        query.stop()
    assert snapshots > 3 and seen <= set(range(800))
    # the same query again until the input ends, compacting at every commit: all visible, once
    start("1", availableNow=True).awaitTermination()
    assert_exactly_once(out, "parquet", 800)
