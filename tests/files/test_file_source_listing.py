"""Incremental discovery: settled directories are not re-listed, and no file is ever skipped or
read twice because of it (driver side, no Spark)."""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

import pytest

from sparklink.files.source.config import FileSourceConfig
from sparklink.files.source.enumerator import FileSplitEnumerator
from sparklink.files.source.listing import DirectoryFileEnumerator
from sparklink.files.source.position import FilePosition
from sparklink.source import READ_ALL, ReadLimit

OLD = (1_000_000, 1_000_000)  # 1970: a modification time older than any position


def _settle() -> None:
    time.sleep(0.15)  # arrival keys (and directory ctimes) must fall behind the 100 ms clock margin


def _enumerator(src: Path, **kwargs) -> FileSplitEnumerator:
    kwargs.setdefault("min_file_age", 0.0)
    return FileSplitEnumerator(FileSourceConfig(paths=(str(src),), format="text", **kwargs), streaming=True)


def _write(directory: Path, name: str, *, staging: Path | None = None, old_mtime: bool = False) -> Path:
    """A file moved into ``directory`` atomically (optionally with a 1970 modification time)."""
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / name
    if staging is None:
        target.write_text(f"{name}\n")
        return target
    staging.mkdir(parents=True, exist_ok=True)
    temp = staging / name
    temp.write_text(f"{name}\n")
    if old_mtime:
        os.utime(temp, OLD)
    os.replace(temp, target)
    return target


def _batch(enumerator: FileSplitEnumerator, start: dict, end: dict) -> list[str]:
    return sorted(s["path"] for split in enumerator.plan_splits(start, end) for s in split.state["segments"])


def _drain(enumerator: FileSplitEnumerator, start: dict, limit=READ_ALL) -> tuple[dict, list[str]]:
    """Every file admitted from ``start`` until nothing is new: (end position, files in order read)."""
    read: list[str] = []
    while True:
        end = enumerator.latest_offset(start, limit)
        if end == start:
            return start, read
        read.extend(_batch(enumerator, start, end))
        start = end


def _stats(enumerator: FileSplitEnumerator) -> int:
    walk = enumerator.file_enumerator
    assert isinstance(walk, DirectoryFileEnumerator)
    return walk.stats


def test_settled_directories_cost_one_stat_each(tmp_path):
    src = tmp_path / "in"
    for d in range(3):
        for i in range(40):
            _write(src / f"d{d}" / "sub", f"f{i}.txt")
    _settle()
    enumerator = _enumerator(src)
    position, read = _drain(enumerator, enumerator.initial_offset())
    assert len(read) == 120
    before = _stats(enumerator)
    assert enumerator.latest_offset(position, READ_ALL) == position
    assert _stats(enumerator) - before == 1 + 3 + 3  # the root, d0..d2, d0/sub..d2/sub: no file is stat-ed


@pytest.mark.parametrize("where", ["root", "old-dir", "nested-old-dir", "new-nested-dir"],
                         ids=["root", "old-dir", "nested-old-dir", "new-nested-dir"])
def test_a_file_moved_into_a_settled_directory_is_read_once(tmp_path, where):
    """A rename into a directory sets the directory's ctime (not only the file's), even when the
    file's modification time is from 1970: the directory is scanned again and the file is read once."""
    src = tmp_path / "in"
    for d in range(2):
        for i in range(5):
            _write(src / f"d{d}" / "x" / "y", f"f{i}.txt")
        _write(src / f"d{d}", "top.txt")
    _settle()
    enumerator = _enumerator(src)
    position, read = _drain(enumerator, enumerator.initial_offset())
    assert len(read) == 12
    assert enumerator.latest_offset(position, READ_ALL) == position  # settled now
    target = {"root": src, "old-dir": src / "d1", "nested-old-dir": src / "d0" / "x" / "y",
              "new-nested-dir": src / "d1" / "x" / "new" / "deeper"}[where]
    moved = _write(target, "moved.txt", staging=tmp_path / "staging", old_mtime=True)
    _settle()
    position, read = _drain(enumerator, position)
    assert read == [str(moved)]
    assert _drain(enumerator, position)[1] == []


def test_a_file_written_in_place_is_read_once_it_is_stable(tmp_path):
    """Created in a settled directory and still being written: it is re-stat-ed on every trigger
    until it has been stable for minFileAge, then read once."""
    src = tmp_path / "in"
    _write(src / "d", "old.txt")
    _settle()
    enumerator = _enumerator(src, min_file_age=0.5)
    time.sleep(0.6)
    position, read = _drain(enumerator, enumerator.initial_offset())
    assert len(read) == 1
    growing = src / "d" / "growing.txt"
    with open(growing, "w") as handle:
        for _ in range(3):
            handle.write("line\n")
            handle.flush()
            os.fsync(handle.fileno())
            assert enumerator.latest_offset(position, READ_ALL) == position  # still changing: not admitted
            time.sleep(0.2)
    time.sleep(0.7)
    position, read = _drain(enumerator, position)
    assert read == [str(growing)]
    assert _drain(enumerator, position)[1] == []


def test_a_directory_deleted_and_recreated_is_scanned_again(tmp_path):
    src = tmp_path / "in"
    _write(src / "d", "a.txt")
    _settle()
    enumerator = _enumerator(src)
    position, _ = _drain(enumerator, enumerator.initial_offset())
    (src / "d" / "a.txt").unlink()
    (src / "d").rmdir()
    again = _write(src / "d", "a.txt")  # same names; the inode may even be reused
    _settle()
    assert _drain(enumerator, position)[1] == [str(again)]


def test_an_older_batch_is_planned_from_a_full_listing(tmp_path):
    """Spark may plan a batch again (same process) after the listing moved on and pruned the
    directories that batch read: planning lists again from the batch's start."""
    src = tmp_path / "in"
    first = [_write(src / "a", f"f{i}.txt") for i in range(3)]
    _settle()
    enumerator = _enumerator(src)
    start = enumerator.initial_offset()
    end = enumerator.latest_offset(start, READ_ALL)
    assert enumerator.latest_offset(end, READ_ALL) == end  # listed from `end`: directory `a` is pruned
    assert _batch(enumerator, start, end) == sorted(str(p) for p in first)


def test_random_arrivals_are_read_exactly_once_as_with_full_listings(tmp_path):
    """Files moved (with old modification times) into random old, new and nested directories
    between triggers with small admission limits: the incremental enumerator admits exactly the
    same positions as a fresh one (which lists everything), and reads every file exactly once."""
    rng = random.Random(7)
    src, staging = tmp_path / "in", tmp_path / "staging"
    directories = [src, src / "a", src / "a" / "b", src / "c=1", src / "c=1" / "d"]
    written: list[str] = []
    incremental = _enumerator(src)
    position = incremental.initial_offset()
    read: list[str] = []
    for round_ in range(12):
        for n in range(rng.randint(0, 6)):
            if rng.random() < 0.2:
                directories.append(rng.choice(directories) / f"new{round_}{n}")
            moved = _write(rng.choice(directories), f"r{round_}-{n}.txt", staging=staging,
                           old_mtime=rng.random() < 0.5)
            written.append(str(moved))
        _settle()
        limit = ReadLimit(max_files=rng.randint(1, 4))
        for _ in range(rng.randint(1, 3)):
            end = incremental.latest_offset(position, limit)
            reference = _enumerator(src).latest_offset(position, limit)  # no cache: a full listing
            assert FilePosition.from_offset(end) == FilePosition.from_offset(reference)
            read.extend(_batch(incremental, position, end))
            position = end
    position, rest = _drain(incremental, position)
    read.extend(rest)
    assert sorted(read) == sorted(written)
    assert len(read) == len(set(read))
