"""File discovery: what files exist under the source's paths (Flink's ``FileEnumerator``).

Runs on the driver, once per trigger for streams (once for ``spark.read``). The default
:class:`DirectoryFileEnumerator` walks the paths recursively, skips hidden names (leading ``.``
or ``_``) and temporary files, applies the optional glob to file names, and reads hive-style
``key=value`` directory names as partition values. A custom enumerator (option
``fileEnumerator = "module:ClassName"``) may replace it, e.g. to list an object store or to
read a manifest.

Each file carries an *arrival key*: its status-change time (``st_ctime_ns``) on POSIX file
systems. Renaming a file into the directory sets it, so a file moved in atomically arrives
with the time it became visible, even if its modification time is old. The source orders
files by ``(arrival key, path)``; that order is what makes its offsets O(1).
"""

from __future__ import annotations

import fnmatch
import importlib
import os
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from sparklink.errors import ConfigError, DataError
from sparklink.files.source.config import OPTION_FILE_ENUMERATOR
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


class DirectoryFileEnumerator(FileEnumerator):
    """Recursive listing with ``os.scandir``: one ``stat`` per file, no file is opened."""

    def enumerate_files(self, paths: Sequence[str], glob: str | None) -> Iterator[FileStatus]:
        for root in paths:
            root = os.path.abspath(root)
            if os.path.isfile(root):
                stat = os.stat(root)
                yield FileStatus(arrival_ns=stat.st_ctime_ns, path=root, size=stat.st_size)
                continue
            if not os.path.isdir(root):
                raise DataError(f"path '{root}' does not exist")
            yield from self._walk(root, [], glob)

    def _walk(self, directory: str, relative_dirs: list[str], glob: str | None) -> Iterator[FileStatus]:
        try:
            entries = list(os.scandir(directory))
        except FileNotFoundError:  # removed between the parent's listing and now
            return
        partition: Partition | None = None
        for entry in entries:
            name = entry.name
            if is_hidden(name):
                continue
            try:
                if entry.is_dir():
                    yield from self._walk(entry.path, relative_dirs + [name], glob)
                    continue
                if glob is not None and not fnmatch.fnmatchcase(name, glob):
                    continue
                stat = entry.stat()
            except FileNotFoundError:  # deleted while listing: it is simply not there
                continue
            if partition is None:
                partition = parse_partition(relative_dirs)
            yield FileStatus(arrival_ns=stat.st_ctime_ns, path=entry.path, size=stat.st_size, partition=partition)


def load_enumerator(spec: str | None) -> FileEnumerator:
    """The enumerator named by ``module:ClassName`` (or the default directory walk)."""
    if spec is None:
        return DirectoryFileEnumerator()
    module_name, _, class_name = spec.partition(":")
    try:
        factory = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(OPTION_FILE_ENUMERATOR, f"cannot load '{spec}': {exc}") from None
    enumerator = factory()
    if not isinstance(enumerator, FileEnumerator):
        raise ConfigError(OPTION_FILE_ENUMERATOR, f"'{spec}' is not a sparklink FileEnumerator")
    return enumerator


def list_sorted(enumerator: FileEnumerator, paths: Sequence[str], glob: str | None) -> list[FileStatus]:
    """All files in reading order ``(arrival key, path)``."""
    return sorted(enumerator.enumerate_files(paths, glob), key=lambda f: (f.arrival_ns, f.path))
