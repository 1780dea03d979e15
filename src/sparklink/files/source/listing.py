"""File discovery: what files exist under the source's paths (Flink's ``FileEnumerator``).

Runs on the driver, once per trigger for streams (once for ``spark.read``). The default
:class:`DirectoryFileEnumerator` walks the paths recursively, skips hidden names (leading ``.``
or ``_``) and temporary files, applies the optional glob to file names, and reads hive-style
``key=value`` directory names as partition values. A custom enumerator (option
``fileEnumerator = "module:ClassName"``) may replace it, e.g. to list an object store or to
read a manifest.

Each file carries an *arrival key*: its status-change time (``st_ctime_ns``) on POSIX file
systems (for a directory with Spark's log, see :mod:`~sparklink.files.source.log_listing`; for
S3 prefixes, :mod:`~sparklink.files.source.object_listing`). Renaming a file into the directory sets it, so a file moved in atomically arrives
with the time it became visible, even if its modification time is old. The source orders
files by ``(arrival key, path)``; that order is what makes its offsets O(1).

Incremental listing (streams): :meth:`FileEnumerator.enumerate_after` may leave out files that
sort at or before a position. The directory walk uses it to skip *settled* directories: a
directory whose files all sorted at or before the position when it was last scanned, and whose
own status-change time (``st_ctime_ns``) and inode are unchanged since. Creating, deleting or
renaming an entry in a directory sets its ctime, which cannot be set back, so an unchanged
ctime means an unchanged set of names; the directory is only trusted if its ctime was already
older than the listing's cutoff (the start of the listing minus ``minFileAge`` and the clock
margin) when it was scanned, so that a change in the same clock tick cannot go unseen. A
settled directory costs one ``stat`` (its subdirectories are still visited); its files are not
stat-ed again. Consequence: a file already read that is modified in place (which the source
does not support) is not read again while the query runs.
"""

from __future__ import annotations

import fnmatch
import os
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from stat import S_ISDIR
from typing import Any

from sparklink.errors import DataError
from sparklink.files.source.partitions import Partition, parse_partition

TEMP_SUFFIXES = (".tmp", ".temp", "._COPYING_", ".inprogress", ".partial")


@dataclass(frozen=True, kw_only=True, order=True)
class FileStatus:
    """One file found by an enumerator. Ordering is the source's reading order."""

    arrival_ns: int
    path: str
    size: int
    partition: Partition = ()

    @property
    def sort_key(self) -> tuple[int, str]:
        return (self.arrival_ns, self.path)


def is_hidden(name: str) -> bool:
    """Names a reader must not see: hidden (``.``/``_``) and temporary files."""
    return name.startswith((".", "_")) or name.endswith(TEMP_SUFFIXES)


class FileEnumerator(ABC):
    """The hook that lists files (driver side, once per trigger). Subclasses must be importable
    and constructible without arguments; they must not read file contents."""

    @abstractmethod
    def enumerate_files(self, paths: Sequence[str], glob: str | None) -> Iterator[FileStatus]:
        """Every readable file under ``paths`` (any order). Missing paths raise DataError."""

    def enumerate_after(self, paths: Sequence[str], glob: str | None, *, after: tuple[int, str],
                        cutoff_ns: int) -> Iterator[FileStatus]:
        """Every readable file that may sort after ``after`` (it may also yield files at or before
        it: the caller filters). ``cutoff_ns``: files and directories changed at or before this
        arrival time are stable. Default: :meth:`enumerate_files` (no pruning)."""
        return self.enumerate_files(paths, glob)


@dataclass(frozen=True, kw_only=True)
class _ScannedDirectory:
    """What the last scan of one directory found (driver memory only, never persisted)."""

    inode: int
    ctime_ns: int
    newest: tuple[int, str] | None          # the greatest sort key of its readable files
    subdirectories: tuple[str, ...] = field(default=())


class DirectoryFileEnumerator(FileEnumerator):
    """Recursive listing with ``os.scandir``: one ``stat`` per file, no file is opened.

    Driver side. Keeps, per directory, what its last scan found (see the module docstring), so
    that :meth:`enumerate_after` stats only the files of directories that changed or still hold
    unread files: with many processed files in settled directories a trigger costs one ``stat``
    per directory instead of one per file.
    """

    def __init__(self) -> None:
        self._scanned: dict[str, _ScannedDirectory] = {}
        self.stats = 0  # files and directories stat-ed (for tests and the benchmark)

    def enumerate_files(self, paths: Sequence[str], glob: str | None) -> Iterator[FileStatus]:
        return self._enumerate(paths, glob, after=None, cutoff_ns=None)

    def enumerate_after(self, paths: Sequence[str], glob: str | None, *, after: tuple[int, str],
                        cutoff_ns: int) -> Iterator[FileStatus]:
        return self._enumerate(paths, glob, after=after, cutoff_ns=cutoff_ns)

    def _enumerate(self, paths: Sequence[str], glob: str | None, *, after: tuple[int, str] | None,
                   cutoff_ns: int | None) -> Iterator[FileStatus]:
        for root in paths:
            root = os.path.abspath(root)
            try:
                stat = os.stat(root)
            except FileNotFoundError:
                raise DataError(f"path '{root}' does not exist") from None
            self.stats += 1
            if not S_ISDIR(stat.st_mode):
                yield FileStatus(arrival_ns=stat.st_ctime_ns, path=root, size=stat.st_size)
                continue
            yield from self._walk(root, stat, [], glob, after, cutoff_ns)

    def _walk(self, directory: str, dir_stat: os.stat_result, relative_dirs: list[str], glob: str | None,
              after: tuple[int, str] | None, cutoff_ns: int | None) -> Iterator[FileStatus]:
        known = self._scanned.get(directory)
        if (after is not None and known is not None and known.inode == dir_stat.st_ino
                and known.ctime_ns == dir_stat.st_ctime_ns and (known.newest is None or known.newest <= after)):
            # settled: same names as at its last scan, and every file there was at or before `after`
            for name in known.subdirectories:
                path = os.path.join(directory, name)
                try:
                    sub_stat = os.stat(path)
                except FileNotFoundError:  # removed since; then this directory's ctime changes too
                    continue
                self.stats += 1
                if S_ISDIR(sub_stat.st_mode):
                    yield from self._walk(path, sub_stat, relative_dirs + [name], glob, after, cutoff_ns)
            return
        try:
            entries = list(os.scandir(directory))
        except FileNotFoundError:  # removed between the parent's listing and now
            self._scanned.pop(directory, None)
            return
        partition: Partition | None = None
        subdirectories: list[str] = []
        newest: tuple[int, str] | None = None
        for entry in entries:
            name = entry.name
            if is_hidden(name):
                continue
            try:
                if entry.is_dir():
                    sub_stat = entry.stat()
                    self.stats += 1
                    subdirectories.append(name)
                    yield from self._walk(entry.path, sub_stat, relative_dirs + [name], glob, after, cutoff_ns)
                    continue
                if glob is not None and not fnmatch.fnmatchcase(name, glob):
                    continue
                stat = entry.stat()
                self.stats += 1
            except FileNotFoundError:  # deleted while listing: it is simply not there
                continue
            key = (stat.st_ctime_ns, entry.path)
            if newest is None or key > newest:
                newest = key
            if after is not None and key <= after:
                continue  # already read: not even an object for it
            if partition is None:
                partition = parse_partition(relative_dirs)
            yield FileStatus(arrival_ns=key[0], path=key[1], size=stat.st_size, partition=partition)
        if cutoff_ns is not None and dir_stat.st_ctime_ns <= cutoff_ns:
            self._scanned[directory] = _ScannedDirectory(inode=dir_stat.st_ino, ctime_ns=dir_stat.st_ctime_ns,
                                                         newest=newest, subdirectories=tuple(subdirectories))
        else:  # changed too recently to trust an unchanged ctime later: scan it again next time
            self._scanned.pop(directory, None)


def list_sorted(enumerator: FileEnumerator, paths: Sequence[str], glob: str | None) -> list[FileStatus]:
    """All files in reading order ``(arrival key, path)``."""
    return sorted(enumerator.enumerate_files(paths, glob), key=lambda f: (f.arrival_ns, f.path))


def list_sorted_after(enumerator: FileEnumerator, paths: Sequence[str], glob: str | None, *,
                      after: tuple[int, str], cutoff_ns: int, **hints: Any) -> list[FileStatus]:
    """The files that sort after ``after``, in reading order (streams, once per trigger).
    ``hints``: further keywords for an enumerator that takes them (the S3 listing's ``read``)."""
    files = [f for f in enumerator.enumerate_after(paths, glob, after=after, cutoff_ns=cutoff_ns, **hints)
             if f.sort_key > after]
    files.sort(key=lambda f: (f.arrival_ns, f.path))
    return files
