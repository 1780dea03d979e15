"""Exactly-once reading across driver crashes and task failures, while files keep arriving.

Each test streams sparklink.files into the transactional ``sparklink.directory`` sink in a
driver process, crashes it (SIGKILL of the process group, at a named fault point or from the
test), restarts with the same checkpoint and checks every input row is committed exactly once.
The last run of each test, which drains everything, runs in the test's own Spark session.
"""

from __future__ import annotations

import threading
from collections import Counter
from pathlib import Path

import pytest

from tests.files.jobs_source import committed_ids, stream_to_directory, write_csv_file

JOB = "tests.files.jobs_source:stream_to_directory"
ROWS_PER_FILE = 5


def _paths(tmp_path: Path) -> tuple[Path, Path, Path]:
    src = tmp_path / "in"
    src.mkdir()
    return src, tmp_path / "out", tmp_path / "ck"


def _write_files(src: Path, first: int, count: int) -> None:
    for index in range(first, first + count):
        write_csv_file(src, f"f-{index:05d}.csv", range(index * ROWS_PER_FILE, (index + 1) * ROWS_PER_FILE))


def _assert_exactly_once(out: Path, files: int) -> None:
    counts = Counter(committed_ids(out))
    duplicates = {i: c for i, c in counts.items() if c > 1}
    assert not duplicates, f"duplicated ids: {sorted(duplicates)[:10]}"
    assert sorted(counts) == list(range(files * ROWS_PER_FILE))


class _Feeder(threading.Thread):
    """Moves new files into the source directory while a driver runs."""

    def __init__(self, src: Path, first: int):
        super().__init__(daemon=True)
        self.src, self.next, self.stopped = src, first, threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(0.05):
            _write_files(self.src, self.next, 1)
            self.next += 1

    def stop(self) -> int:
        self.stopped.set()
        self.join()
        return self.next


def _killed_while_files_arrive(spark, tmp_path, files_before: int, kill_runs) -> None:
    """Land ``files_before`` files, keep landing more while ``kill_runs(src, out, ck)`` runs
    drivers that get killed, then drain everything with one last run: every row once."""
    src, out, ck = _paths(tmp_path)
    _write_files(src, 0, files_before)
    feeder = _Feeder(src, files_before)
    feeder.start()
    try:
        kill_runs(src, out, ck)
    finally:
        total = feeder.stop()
    stream_to_directory(spark, src=str(src), out=str(out), checkpoint=str(ck), max_files=1000)
    _assert_exactly_once(out, total)


@pytest.mark.slow
def test_driver_killed_at_each_commit_point_while_files_arrive(driver, tmp_path, spark):
    """One query, restarted after each kill while files keep arriving: SIGKILLed with the
    micro-batch's offsets logged and nothing written, then after the sink's commit (before
    Spark's: the micro-batch is replayed from the same files). Kills at moments drawn from the
    commit log's progress, wherever the micro-batch is, are tests/test_chaos.py's (this source
    into the file sink)."""
    def kill_runs(src, out, ck):
        args = {"src": str(src), "out": str(out), "checkpoint": str(ck), "available_now": False}
        for number, fault in enumerate(["sink.before_log", "sink.after_commit"], start=1):
            crashed = driver.run(JOB, args, fault=f"{fault}:kill", once_marker=str(tmp_path / f"fired-{number}"),
                                 timeout=240)
            assert crashed.killed, f"{fault}: {crashed.output}"

    _killed_while_files_arrive(spark, tmp_path, 4, kill_runs)


def test_failed_split_task_is_retried_without_duplicates(spark, armed, tmp_path):
    """One large CSV cut into byte-range splits. First every attempt of every split task fails
    after it wrote (the query fails, nothing is committed: a crash in the middle of the file);
    the restart from the checkpoint then has every split task's first attempt fail after its
    read (shared session, ``local[2,3]``): every row once."""
    src, out, ck = _paths(tmp_path)
    rows = 20_000
    write_csv_file(src, "big.csv", range(rows))
    with armed("writer.after_write:raise"), pytest.raises(Exception):
        stream_to_directory(spark, src=str(src), out=str(out), checkpoint=str(ck), max_split_bytes="64KB")
    assert not committed_ids(out)
    with armed("writer.after_write:raise", attempt=0):
        stream_to_directory(spark, src=str(src), out=str(out), checkpoint=str(ck), max_split_bytes="64KB")
    assert sorted(committed_ids(out)) == list(range(rows))
    assert len(list(out.glob("part-*.parquet"))) >= 4  # the file was read by several splits
