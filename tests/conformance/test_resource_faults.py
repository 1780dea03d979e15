"""Resource faults: a full disk and permission denied, each with a clear error, nothing partial
visible, and a clean restart once the fault is gone.

The full disk is a small tmpfs mounted for the test; permission denied comes from running the
driver (and so Spark's executors) as the unprivileged user ``nobody`` against directories it
may not write. Both need root to set up; without it the tests are skipped with that reason.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import pytest

from sparklink.testing import error_text
from sparklink.testing.conformance import hidden_data_files, plain_reader_ids
from sparklink.testing.conformance.jobs import sequence_to_sink

JOB = "sparklink.testing.conformance.jobs:sequence_to_sink"
ALL_IDS = list(range(300))
SYSTEM_PYTHON = Path(f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}")

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs and switching to 'nobody' need root")]


def file_sink_args(root: Path) -> dict:
    return {"fmt": "sparklink.files", "checkpoint": str(root / "ck"),
            "options": {"path": str(root / "out"), "format": "parquet", "bucketAssigner": "column",
                        "bucketColumn": "split"}}


@pytest.fixture
def small_disk(tmpfs):
    """A 160 KB tmpfs: big enough for the checkpoint and the first micro-batch, not for all three."""
    return tmpfs("160k")


def test_full_disk_fails_clearly_and_restarts_cleanly(spark, small_disk):
    """Both runs in the test's own session: the disk is full for any process alike."""
    args = dict(file_sink_args(small_disk), rows_per_split=4000, max_rows_per_trigger=4000)
    with pytest.raises(Exception) as failure:
        sequence_to_sink(spark, **args)
    # the disk fills in a task or in the driver's commit, depending on timing: read the whole chain
    assert "No space left on device" in error_text(failure.value), error_text(failure.value)[-3000:]
    committed = plain_reader_ids(small_disk / "out")
    assert len(committed) == len(set(committed))            # what is visible is complete and unique
    subprocess.run(["mount", "-o", "remount,size=64m", str(small_disk)], check=True)  # the fault is gone
    sequence_to_sink(spark, **args)                           # the restart
    assert plain_reader_ids(small_disk / "out") == list(range(12000))
    assert hidden_data_files(small_disk / "out") == []


@pytest.fixture
def as_nobody():
    """Run drivers as 'nobody' with the system Python and this environment's packages, in a
    work directory 'nobody' can reach (pytest's own temporary root is private to root)."""
    if not SYSTEM_PYTHON.exists():
        pytest.skip(f"{SYSTEM_PYTHON} (the same Python minor version, runnable by 'nobody') is not installed")
    root = Path(tempfile.mkdtemp(prefix="sparklink-nobody-"))
    os.chmod(root, 0o755)
    shutil.chown(root, "nobody")
    site = sysconfig.get_paths()["purelib"]
    src = Path(__file__).resolve().parents[2] / "src"
    env = {"HOME": str(root), "PYTHONPATH": f"{src}:{site}"}
    yield root, {"env": env, "python": str(SYSTEM_PYTHON), "command_prefix": ["runuser", "-u", "nobody", "--"]}
    shutil.rmtree(root, ignore_errors=True)


def _give_to_nobody(path: Path) -> None:
    subprocess.run(["chown", "-R", "nobody", str(path)], check=True)


BLOCKED = {"output-directory": "out", "commit-log-directory": "out/_sparklink/commits", "bucket-directory": "out/split=1"}  # Hive-style column bucket


def test_permission_denied_fails_clearly_and_restarts_cleanly(driver, spark, as_nobody):
    """One output per directory that 'nobody' may not write (the output, the sink's commit log, a
    bucket), each written by its own query; the three queries run one after the other in one
    driver process running as 'nobody'. Each fails naming the directory; the restarts run in
    the test's own session once the directories are given back."""
    root, how = as_nobody
    runs = {}
    for name, blocked in BLOCKED.items():
        case = root / name
        for directory in ("out", "out/_sparklink/commits", "out/split=1", "ck"):
            (case / directory).mkdir(parents=True, exist_ok=True)
        runs[name] = file_sink_args(case)
    _give_to_nobody(root)
    for name, blocked in BLOCKED.items():
        shutil.chown(root / name / blocked, "root")               # not writable by 'nobody'
        os.chmod(root / name / blocked, 0o755)
    report = root / "errors.json"
    result = driver.run("tests.conformance.resource_jobs:sink_each_output_and_record_errors",
                        {"runs": runs, "report": str(report)}, **how)
    assert result.ok and report.exists(), result.output
    errors = json.loads(report.read_text())
    for name, blocked in BLOCKED.items():
        assert errors[name] is not None, f"{name}: the query did not fail"
        assert "Permission denied" in errors[name] and str(root / name / blocked) in errors[name], \
            f"{name}: {errors[name][-3000:]}"
        assert plain_reader_ids(root / name / "out") == [], name  # nothing partial is visible
    _give_to_nobody(root)                                         # the fault is gone
    for name in BLOCKED:
        sequence_to_sink(spark, **runs[name])                     # the restart, in the test's own session
        assert plain_reader_ids(root / name / "out") == ALL_IDS, name
        assert hidden_data_files(root / name / "out") == [], name
