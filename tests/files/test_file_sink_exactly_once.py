"""Exactly-once of the file sink under real SIGKILLs of the driver's process group at named
steps of the commit protocol (kills at moments picked at random from a running query's progress:
tests/test_chaos.py, the file source into this sink).

Every named fault point of the file sink (``filesink.*``, ``compaction.*``) and of the SDK is
also crashed at by simulation (the sink rebuilt from its options, Spark's calls replayed against
the same files) for four configurations in tests/conformance/test_sink_conformance.py, which
also fails tasks on their first attempt at ``writer.after_write`` and
``filesink.writer.before_commit``. The configuration here is the hardest one: a row format
whose in-progress files are carried across micro-batches. After the crashes the query finishes
(in the test's own session) with ``rolloverInterval=0s``, so that every carried file is
finished; a plain reader (skipping '.'/'_' names) must then find every record exactly once and
no hidden file.
"""

from __future__ import annotations


import pytest

from sparklink.testing.faults import ENV_BATCH
from tests.files.jobs_sink import stream_to_files
from tests.files.sink_readers import assert_exactly_once, hidden_files

JOB = "tests.files.jobs_sink:stream_to_files"
ROW = {"format": "json", "bucketAssigner": "column", "bucketColumn": "kind", "rollingPolicy": "default",
       "maxPartSize": "3KB", "rolloverInterval": "1h", "inactivityInterval": "1h"}
SEQUENCE_ROWS = 500  # 100 rows per trigger: kills in micro-batches 1 and 3 leave input for the end
# the file sink's own states on disk: its state N written, nothing renamed; part of the renames
# done. The SDK's points (a task staged only, everything done but Spark's own commit) are killed
# at for real in examples/conformance and crashed at by simulation for this configuration in
# tests/conformance (TestFileSinkJsonCarried); each driver here costs about 25 s.
# (point, micro-batch): at 3 KB per part file micro-batch 2 finishes no file, micro-batch 3 does
KILL_POINTS = [("filesink.after_state", 1), ("filesink.after_first_rename", 3)]

pytestmark = pytest.mark.slow


def _args(tmp_path, options, rows, **extra):
    return {"out": str(tmp_path / "out"), "checkpoint": str(tmp_path / "ck"), "rows": rows, "per_trigger": 100,
            "options": options, **extra}


def _finish_and_check(spark, tmp_path, rows, per_trigger=100):
    """Run the query to its end in the test's own session, rolling every carried file."""
    stream_to_files(spark, **_args(tmp_path, {**ROW, "rolloverInterval": "0s"}, rows, per_trigger=per_trigger))
    assert_exactly_once(tmp_path / "out", "json", rows)
    assert hidden_files(tmp_path / "out") == []


def test_driver_killed_at_each_commit_step_with_carried_files(driver, tmp_path, spark):
    """One query, a driver process per kill, killed at each point of ``KILL_POINTS`` in its micro-batch."""
    for point, batch in KILL_POINTS:
        result = driver.run(JOB, _args(tmp_path, ROW, SEQUENCE_ROWS), fault=f"{point}:kill",
                            once_marker=str(tmp_path / f"fired-{batch}"), env={ENV_BATCH: str(batch)})
        assert result.killed, f"{point}: {result.output}"
        assert (tmp_path / f"fired-{batch}").exists()
    _finish_and_check(spark, tmp_path, SEQUENCE_ROWS + 100)
