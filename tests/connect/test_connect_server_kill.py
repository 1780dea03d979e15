"""The Spark Connect *server* killed mid-stream (SIGKILL of its process group: the driver JVM and
its Python workers) and restarted: the client reconnects with a new session, restarts the query
on the same checkpoint (the checkpoint and the output are the server's), and every id is in the
output exactly once, as Spark's own reader and pyarrow read it.

The kill is triggered by progress (the sink's commit log has two entries), not by a timer."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import pyarrow.dataset as pa_dataset

from sparklink.testing.drivers import logged_batches

SPLITS, ROWS_PER_SPLIT, ROWS_PER_TRIGGER = 2, 150, 50  # 6 micro-batches


def _start(session, out: Path, checkpoint: Path):
    return (session.readStream.format("sparklink.sequence").option("numSplits", SPLITS)
            .option("rowsPerSplit", ROWS_PER_SPLIT).option("maxRowsPerTrigger", ROWS_PER_TRIGGER).load()
            .writeStream.format("sparklink.files").option("path", str(out)).option("format", "parquet")
            .option("bucketAssigner", "basepath").option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True).start())


def test_server_killed_mid_stream_and_restarted_every_id_once(connect_server, tmp_path):
    out, checkpoint = tmp_path / "out", tmp_path / "ck"
    commits = out / "_sparklink" / "commits"
    try:
        query = _start(connect_server.session(), out, checkpoint)
        deadline = time.monotonic() + 300
        while logged_batches(commits) < 2:
            assert query.isActive or logged_batches(commits) >= 2, \
                f"the query ended before its second commit: {query.exception()}\n{connect_server.log_tail()}"
            assert time.monotonic() < deadline, f"no second commit within 300 s\n{connect_server.log_tail()}"
            time.sleep(0.05)
        connect_server.kill()
        killed_at = logged_batches(commits)
        assert killed_at < SPLITS * ROWS_PER_SPLIT // ROWS_PER_TRIGGER, "the kill came after the last batch"
    finally:
        if connect_server.process is None or connect_server.process.poll() is not None:
            connect_server.start()  # the next tests need the shared server
    session = connect_server.session()  # a new client session on the restarted server
    _start(session, out, checkpoint).awaitTermination()
    expected = list(range(SPLITS * ROWS_PER_SPLIT))
    ids = pa_dataset.dataset(str(out), format="parquet").to_table().column("id").to_pylist()
    assert [i for i, n in Counter(ids).items() if n > 1] == [], "ids written twice"
    assert sorted(ids) == expected
    assert sorted(r.id for r in session.read.parquet(str(out)).select("id").collect()) == expected
