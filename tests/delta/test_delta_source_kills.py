"""The Delta source's real driver SIGKILL sequence: a table written by delta-rs (12 versions)
streamed by ``sparklink.delta`` into the file sink, the driver SIGKILLed twice once the sink's
commit log shows progress, then a final availableNow run: pyarrow reads every row once."""

from __future__ import annotations

from collections import Counter

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from sparklink.testing import logged_batches
from sparklink.testing.conformance import plain_reader_ids
from tests.delta.jobs import delta_to_files

JOB = "tests.delta.jobs:delta_to_files"
VERSIONS, ROWS = 12, 10


@pytest.mark.slow
def test_delta_source_driver_sigkilled_twice(driver, tmp_path, spark):
    table, out, ck = tmp_path / "t", tmp_path / "out", tmp_path / "ck"
    for v in range(VERSIONS):
        ids = pa.array(range(v * ROWS, (v + 1) * ROWS), pa.int64())
        write_deltalake(str(table), pa.table({"id": ids, "v": pa.compute.multiply(ids, 2)}), mode="append")
    args = {"table": str(table), "out": str(out), "checkpoint": str(ck), "available_now": False}
    commits = out / "_sparklink" / "commits"
    for target, jitter in ((2, 0.0), (5, 0.3)):
        driver.start(JOB, args).kill_when(lambda: logged_batches(commits) >= target,
                                          what=f"{target} file sink commits", timeout=240, jitter=jitter)
    assert logged_batches(commits) < VERSIONS, "the stream ended before the last kill"
    delta_to_files(spark, **dict(args, available_now=True))
    counts = Counter(plain_reader_ids(out))
    assert {i: c for i, c in counts.items() if c > 1} == {}
    assert sorted(counts) == list(range(VERSIONS * ROWS))
