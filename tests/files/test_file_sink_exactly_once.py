"""Exactly-once of the file sink: SIGKILL of the driver at every step of the commit protocol
and at a random moment of a running query, and task failures on first attempts (local[2,3]).

After each crash the query is restarted from its checkpoint with ``rolloverInterval=0s`` (so
every carried in-progress file is finished at the first commit) and more input; a plain
reader (skipping '.'/'_' names) must then find every record exactly once and no hidden file.
"""

from __future__ import annotations

import random
import time

import pytest

from tests.files.sink_readers import assert_exactly_once, hidden_files

JOB = "tests.files.jobs_sink:stream_to_files"
RUNNING_JOB = "tests.files.jobs_sink:stream_with_processing_time"
# a row format carried across batches (the hardest case) and a bulk format
ROW = {"format": "json", "bucketAssigner": "column", "bucketColumn": "kind", "rollingPolicy": "default",
       "maxPartSize": "3KB", "rolloverInterval": "1h", "inactivityInterval": "1h"}
BULK = {"format": "parquet", "bucketAssigner": "basepath"}
FIRST_ROWS, FINAL_ROWS = 300, 400
SEQUENCE_ROWS = 500  # 100 rows per trigger: kills in micro-batches 1, 2 and 3 leave input for the end

pytestmark = pytest.mark.slow


def _args(tmp_path, options, rows, **extra):
    return {"out": str(tmp_path / "out"), "checkpoint": str(tmp_path / "ck"), "rows": rows, "per_trigger": 100,
            "options": options, **extra}


def _finish_and_check(driver, tmp_path, options, fmt):
    final = dict(options)
    if final.get("rollingPolicy") == "default":
        final["rolloverInterval"] = "0s"
    result = driver.run(JOB, _args(tmp_path, final, FINAL_ROWS))
    assert result.ok, result.output
    assert_exactly_once(tmp_path / "out", fmt, FINAL_ROWS)
    assert hidden_files(tmp_path / "out") == []


def _kill_sequence_then_finish(driver, tmp_path, options, fmt, points):
    """One query killed at ``points[i]`` in micro-batch i + 1 (a restart between kills), then
    run to the end: 500 rows in 5 micro-batches, 600 in the final run."""
    for batch, point in enumerate(points, start=1):
        result = driver.run(JOB, _args(tmp_path, options, SEQUENCE_ROWS), fault=f"{point}:kill",
                            once_marker=str(tmp_path / f"fired-{batch}"), env={"SPARKLINK_FAULT_BATCH": str(batch)})
        assert result.killed, f"{point}: {result.output}"
        assert (tmp_path / f"fired-{batch}").exists()
    final = dict(options)
    if final.get("rollingPolicy") == "default":
        final["rolloverInterval"] = "0s"  # roll the carried files so that everything is visible
    result = driver.run(JOB, _args(tmp_path, final, SEQUENCE_ROWS + 100))
    assert result.ok, result.output
    assert_exactly_once(tmp_path / "out", fmt, SEQUENCE_ROWS + 100)
    assert hidden_files(tmp_path / "out") == []


@pytest.mark.parametrize("points", [
    ["sink.before_commit", "sink.before_log", "sink.after_log"],
    ["filesink.before_state", "filesink.after_state", "filesink.after_first_rename"],
    ["filesink.after_renames", "sink.after_commit", "writer.after_write"],
], ids=["sdk-steps", "state-and-first-rename", "after-renames-and-commit"])
def test_driver_killed_at_each_commit_step_row_format(driver, tmp_path, points):
    _kill_sequence_then_finish(driver, tmp_path, ROW, "json", points)


def test_driver_killed_at_commit_steps_bulk_format(driver, tmp_path):
    _kill_sequence_then_finish(driver, tmp_path, BULK, "parquet",
                               ["sink.after_log", "filesink.after_first_rename", "sink.after_commit"])


@pytest.mark.parametrize("point", ["writer.after_write", "filesink.writer.before_commit"])
def test_task_failures_on_first_attempts_are_retried_without_duplicates(driver, tmp_path, point):
    # every first attempt fails after staging its files: the retry copies carried files instead
    result = driver.run(JOB, _args(tmp_path, ROW, FIRST_ROWS), fault=f"{point}:raise",
                        env={"SPARKLINK_FAULT_ATTEMPT": "0"}, master="local[2,3]")
    assert result.ok, result.output
    _finish_and_check(driver, tmp_path, ROW, "json")


@pytest.mark.parametrize("seed", [1, 2])
def test_driver_killed_at_a_random_time_in_a_running_query(driver, tmp_path, seed):
    process = driver.start(RUNNING_JOB, {**_args(tmp_path, ROW, 2000), "per_trigger": 50})
    time.sleep(random.Random(seed).uniform(12.0, 25.0))  # a kill timer, not polling
    process.kill()
    process.wait(timeout=60)
    result = driver.run(JOB, {**_args(tmp_path, {**ROW, "rolloverInterval": "0s"}, 2000), "per_trigger": 1000})
    assert result.ok, result.output
    assert_exactly_once(tmp_path / "out", "json", 2000)
    assert hidden_files(tmp_path / "out") == []
