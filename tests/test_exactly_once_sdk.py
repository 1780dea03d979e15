"""Exactly-once of the SDK's example pipeline (sequence source -> directory sink) across
driver crashes: SIGKILL of the whole driver process group at each step of the commit
protocol, and at a random moment of a continuous query, then a restart from the same
checkpoint. A plain reader must then see every id exactly once and no staged file."""

import contextlib
import os
import random
import subprocess

import pyarrow.dataset as ds
import pytest

JOB = "tests.jobs_sdk:sequence_to_directory"


def visible_ids(path):
    return sorted(ds.dataset(str(path), format="parquet").to_table().column("id").to_pylist())


@pytest.mark.slow
def test_sigkill_at_each_protocol_point_then_restart(driver, tmp_path):
    """One query killed at each step of the commit protocol, one step per micro-batch:
    (a) every task wrote, before the sink's commit (batch 1); (b) inside commit, after the log
    entry, before finalisation (batch 2); (c) after the sink's commit, before Spark's own commit
    log (batch 3); then run to the end. (writer.after_write is killed at in tests/conformance.)"""
    args = {"out": str(tmp_path / "out"), "checkpoint": str(tmp_path / "ck"), "rows_per_split": 250,
            "max_rows_per_trigger": 150}  # 750 rows: 5 micro-batches
    for batch, point in enumerate(["sink.before_commit", "sink.after_log", "sink.after_commit"], start=1):
        crashed = driver.run(JOB, args, fault=f"{point}:kill", once_marker=str(tmp_path / f"fired-{batch}"),
                             env={"SPARKLINK_FAULT_BATCH": str(batch)})
        assert crashed.killed, f"{point}: {crashed.output}"
        assert (tmp_path / f"fired-{batch}").exists()
    restarted = driver.run(JOB, args)
    assert restarted.ok, restarted.output
    assert visible_ids(tmp_path / "out") == list(range(750))
    assert not list((tmp_path / "out").rglob("_staging/*/*.parquet"))


@pytest.mark.slow
def test_sigkill_at_random_moments_of_a_continuous_query(driver, tmp_path):
    """Kill a continuous query (rows arriving over time) twice at random times, then finish."""
    args = {"out": str(tmp_path / "out"), "checkpoint": str(tmp_path / "ck"), "rows_per_split": 400,
            "max_rows_per_trigger": 60}
    rng = random.Random(int(os.environ.get("SPARKLINK_SEED", "7")))
    for _ in range(2):
        process = driver.start(JOB, dict(args, run_seconds=120))
        with contextlib.suppress(subprocess.TimeoutExpired):  # still running: what we want
            process.process.wait(timeout=rng.uniform(14, 24))
        process.kill()
        process.wait(timeout=60)
    finished = driver.run(JOB, args)
    assert finished.ok, finished.output
    assert visible_ids(tmp_path / "out") == list(range(1200))
