"""Exactly-once of the SDK's example pipeline (sequence source -> directory sink) when the
driver's process group is SIGKILLed at moments picked from a continuous query's progress, then
restarted from the same checkpoint: a plain reader must see every id exactly once and no staged
file.

The directory sink's kills at named protocol points (real SIGKILLs and a simulated crash at
every point) are the published conformance suite's, run against it from
examples/conformance/."""

import os
import random

import pyarrow.dataset as ds
import pytest

from sparklink.testing import logged_batches
from tests.jobs_sdk import sequence_to_directory

JOB = "tests.jobs_sdk:sequence_to_directory"


def visible_ids(path):
    return sorted(ds.dataset(str(path), format="parquet").to_table().column("id").to_pylist())


@pytest.mark.slow
def test_sigkill_at_random_moments_of_a_continuous_query(driver, tmp_path, spark):
    """A continuous query (60 rows per micro-batch) is killed once the sink's
    commit log has grown by a random number of entries: the kill lands at whatever step the
    next micro-batch has reached. The restart that finishes runs in the test's own session."""
    args = {"out": str(tmp_path / "out"), "checkpoint": str(tmp_path / "ck"), "rows_per_split": 400,
            "max_rows_per_trigger": 60}
    commits = tmp_path / "out" / "_sparklink" / "commits"
    rng = random.Random(int(os.environ.get("SPARKLINK_SEED", "7")))
    for _ in range(1):  # one kill at a random step; the named-point sequences kill several times
        target = logged_batches(commits) + rng.randint(1, 4)
        process = driver.start(JOB, dict(args, run_seconds=300))
        process.kill_when(lambda: logged_batches(commits) >= target, what=f"commit-log entry {target}")
    sequence_to_directory(spark, **args)
    assert visible_ids(tmp_path / "out") == list(range(1200))
    assert not list((tmp_path / "out").rglob("_staging/*/*.parquet"))
