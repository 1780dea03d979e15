"""The local file system behind the file-I/O seam (driver and executors).

A create-if-absent writes a temporary file, fsyncs it and hard-links it to its name (the link
fails if the name exists); a put writes a temporary file and renames it over the name; both
fsync the directory. A version is ``<inode>-<mtime_ns>-<size>``. :meth:`LocalStorage.replace` compares
it and renames: on local disk only the query that owns the output writes its metadata (the
owner claim refuses a second query), so the check guards against a file changed by hand
between read and write, not against a concurrent writer.
"""

from __future__ import annotations

import builtins
import fcntl
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sparklink.errors import naming_path
from sparklink.storage.base import FileStorage, NewFile, ObjectInfo, StoredBytes


def _version(stat: os.stat_result) -> str:
    """Every write here renames or links a new inode into place, so the inode tells versions
    apart even within one tick of the file system clock."""
    return f"{stat.st_ino}-{stat.st_mtime_ns}-{stat.st_size}"


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class LocalStorage(FileStorage):
    """Objects are files under ``root``; keys are paths relative to it."""

    def __init__(self, root: str | os.PathLike[str]):
        self.root = Path(root).absolute()

    def describe(self) -> str:
        return f"local directory {self.root}"

    def path(self, key: str) -> Path:
        return self.root / key

    def uri(self, key: str) -> str:
        return str(self.path(key))

    def read(self, key: str) -> StoredBytes | None:
        path = self.path(key)
        try:
            with open(path, "rb") as handle:
                stat = os.fstat(handle.fileno())
                return StoredBytes(data=handle.read(), version=_version(stat))
        except (FileNotFoundError, NotADirectoryError):
            return None

    def _write_temporary(self, path: Path, data: bytes) -> str:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return tmp

    def create_if_absent(self, key: str, data: bytes) -> str | None:
        path = self.path(key)
        with naming_path(path):
            tmp = self._write_temporary(path, data)
            try:
                os.link(tmp, path)
            except FileExistsError:
                return None
            finally:
                Path(tmp).unlink(missing_ok=True)
            fsync_dir(path.parent)
            return _version(path.stat())

    def replace(self, key: str, data: bytes, *, expected_version: str) -> str | None:
        current = self.info(key)
        if current is None or current.version != expected_version:
            return None
        return self.put(key, data)

    def put(self, key: str, data: bytes) -> str:
        path = self.path(key)
        with naming_path(path):
            tmp = self._write_temporary(path, data)
            try:
                os.replace(tmp, path)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
            fsync_dir(path.parent)
            return _version(path.stat())

    def info(self, key: str) -> ObjectInfo | None:
        try:
            stat = self.path(key).stat()
        except (FileNotFoundError, NotADirectoryError):
            return None
        return ObjectInfo(key=key, size=stat.st_size, modified_at=stat.st_mtime, version=_version(stat))

    def list(self, prefix: str = "", *, start_after: str | None = None,
             read_ahead: bool = False) -> Iterator[ObjectInfo]:
        """Files under ``root`` whose relative path starts with ``prefix``, sorted by key (the
        walk collects one directory tree, then sorts: keys order as S3 orders them)."""
        base = self.root / prefix.rpartition("/")[0] if "/" in prefix else self.root
        keys = []
        for directory, _, files in os.walk(base):
            for name in files:
                key = os.path.relpath(os.path.join(directory, name), self.root).replace(os.sep, "/")
                if key.startswith(prefix) and (start_after is None or key > start_after):
                    keys.append(key)
        for key in sorted(keys):
            found = self.info(key)
            if found is not None:  # removed between walk and stat: it is no longer listed
                yield found

    def open_input(self, key: str) -> Any:
        import pyarrow as pa

        return pa.OSFile(str(self.path(key)), "rb")

    def names(self, directory: str, prefix: str = "") -> builtins.list[str]:
        try:
            with os.scandir(self.path(directory) if directory else self.root) as entries:
                return [entry.name for entry in entries if entry.is_file() and entry.name.startswith(prefix)]
        except (FileNotFoundError, NotADirectoryError):
            return []

    def delete(self, key: str) -> None:
        self.path(key).unlink(missing_ok=True)

    @contextmanager
    def exclusive(self, key: str) -> Iterator[None]:
        path = self.path(key)
        lock_path = path.with_name(path.stem + ".lock")
        lock_path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing the descriptor releases the lock

    def check_conditional_writes(self) -> None:
        """Always honoured: a create is a hard link that fails on an existing name."""


class LocalNewFile(NewFile):
    """A data file written straight at its path (its directories made on the way)."""

    def __init__(self, key: str, path: Path):
        self.key = key
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)

    @property
    def target(self) -> Path:
        return self.path

    def finish(self) -> float:
        return self.path.stat().st_mtime

    def discard(self) -> None:
        self.path.unlink(missing_ok=True)
