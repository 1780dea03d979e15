"""Part files on the local file system (or a mount every executor sees): the part-file seam
(:mod:`sparklink.storage.recoverable`) as a hidden file, fsync, rename and truncate.

A part file is written at its hidden key and fsynced when closed or carried; a commit cuts it
to its recorded length and renames it to its final key (a rename never replaces a file: the
final key must be free), then the commit syncs the directories it renamed into. A carried file
is continued in place by a task's first attempt (cut back first to the committed length,
dropping what a crashed run appended); a retry or a speculative attempt copies the committed
bytes into a file of its own, so two attempts never write one file. Driver and executors.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, BinaryIO

from sparklink.errors import CommitError, naming_path
from sparklink.storage.local import LocalStorage, fsync_dir
from sparklink.storage.recoverable import PartRecord, PartStream, RecoverableWriter

# copy_file_range's refusals that mean "this kernel or file system does not copy these files"
_NO_KERNEL_COPY = frozenset({errno.EXDEV, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL})


def truncate_to(path: Path, length: int) -> None:
    """Cut ``path`` back to ``length`` bytes if it is longer (recovery of in-progress files)."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return
    if size > length:
        with open(path, "r+b") as handle:
            handle.truncate(length)
            handle.flush()
            os.fsync(handle.fileno())
    elif size < length:
        raise CommitError(f"in-progress file {path} holds {size} bytes, fewer than the {length} the last "
                          "commit recorded: it was modified outside the sink")


class _LocalPartStream(PartStream):
    """A hidden local file being written (executor side)."""

    def __init__(self, record: PartRecord, path: Path, handle: BinaryIO | None):
        self.record = record
        self.path = path
        self.handle = handle   # None while a bulk writer owns the file (bulk_target)

    def write(self, data: bytes | memoryview) -> None:
        assert self.handle is not None, "a bulk writer owns this file"
        with naming_path(self.path):
            self.handle.write(data)

    def tell(self) -> int:
        assert self.handle is not None, "a bulk writer owns this file"
        return self.handle.tell()

    def write_from(self, source: Any, length: int) -> int:
        """In the kernel (``copy_file_range``: no copy through Python, and a shared extent where
        the file system clones, XFS or Btrfs) when ``source`` is a local file and the kernel
        copies between the two files; else through Python as any store (the same bytes)."""
        assert self.handle is not None, "a bulk writer owns this file"
        try:
            source_fd = source.fileno()
        except (AttributeError, OSError):  # not an OS file (an in-memory buffer)
            return super().write_from(source, length)
        if not hasattr(os, "copy_file_range"):  # not Linux
            return super().write_from(source, length)
        start, target = source.tell(), self.handle.tell()
        self.handle.flush()
        copied = 0
        with naming_path(self.path):
            while copied < length:
                try:
                    moved = os.copy_file_range(source_fd, self.handle.fileno(), length - copied,
                                               start + copied, target + copied)
                except OSError as exc:
                    if copied or exc.errno not in _NO_KERNEL_COPY:
                        raise
                    return super().write_from(source, length)  # e.g. across file systems before Linux 5.3
                if moved == 0:  # the source ended
                    break
                copied += moved
            self.handle.seek(target + copied)
        source.seek(start + copied)
        return copied

    def bulk_target(self) -> Path:
        if self.handle is not None:
            self.handle.close()
            self.handle = None
        return self.path

    def _sync(self) -> None:
        with naming_path(self.path):
            if self.handle is None:  # a bulk writer wrote and synced it
                self.record.length = self.path.stat().st_size
                return
            self.handle.flush()
            os.fsync(self.handle.fileno())
            self.record.length = self.handle.tell()
            self.handle.close()
            self.handle = None

    def close(self) -> None:
        self._sync()

    def persist(self, owner: str) -> None:
        self._sync()

    def discard(self) -> None:
        if self.handle is not None:
            try:
                self.handle.close()
            except OSError:
                pass  # the file is removed or cut back right after; its content no longer matters
            self.handle = None


class LocalRecoverableWriter(RecoverableWriter):
    """Part files under a :class:`LocalStorage`'s root."""

    storage: LocalStorage

    def __init__(self, storage: LocalStorage):
        self.storage = storage
        self._renamed_into: set[Path] = set()

    def _path(self, key: str) -> Path:
        return self.storage.path(key)

    # ------------------------------------------------------------------ executors

    def open(self, record: PartRecord, *, direct: bool = False) -> PartStream:
        path = self._path(record.path)
        with naming_path(path):
            path.parent.mkdir(parents=True, exist_ok=True)
            return _LocalPartStream(record, path, open(path, "wb"))  # noqa: SIM115 - closed by the stream

    def resumes_in_place(self, attempt: int) -> bool:
        return attempt == 0

    def resume(self, record: PartRecord, base: PartRecord, *, attempt: int) -> PartStream:
        source = self._path(base.path)
        handle: BinaryIO
        with naming_path(source):
            if record.path == base.path:
                truncate_to(source, base.length)
                handle = open(source, "r+b")  # noqa: SIM115 - closed by the stream
                handle.seek(base.length)
                return _LocalPartStream(record, source, handle)
            target = self._path(record.path)
            stream = _LocalPartStream(record, target, open(target, "wb"))  # noqa: SIM115 - closed by the stream
            with open(source, "rb") as carried:
                if stream.write_from(carried, base.length) < base.length:
                    stream.discard()
                    raise OSError(f"carried in-progress file {source} is shorter than the {base.length} bytes "
                                  "the last commit recorded")
            return stream

    # ------------------------------------------------------------------ driver, inside a commit

    def commit(self, record: PartRecord) -> bool:
        source, target = self._path(record.path), self._path(record.final)
        if source.exists():
            if target.exists():
                raise CommitError(f"cannot finish {source}: the finished file {target} already exists and is never "
                                  "overwritten")
            truncate_to(source, record.length)
            os.rename(source, target)
            self._renamed_into.add(target.parent)
            return True
        if target.exists():
            return False
        raise CommitError(f"pending file {source} is gone and {target} does not exist: the data of this part file is "
                          "lost (was the output directory changed by hand?)")

    def commit_hidden(self, record: PartRecord) -> None:
        truncate_to(self._path(record.path), record.length)

    def cut_back(self, record: PartRecord) -> None:
        path = self._path(record.path)
        if not path.exists():
            raise CommitError(f"in-progress file {path} recorded by the last commit is gone")
        truncate_to(path, record.length)

    def is_committed(self, record: PartRecord) -> bool:
        return not self._path(record.path).exists() and self._path(record.final).exists()

    def clean_after_commit(self, finished: Iterable[PartRecord], carried: Iterable[PartRecord]) -> None:
        """Sync the directories of the finished files (their renames are durable), those this
        call renamed and those a crashed commit may have renamed without syncing."""
        directories = self._renamed_into | {self._path(record.final).parent for record in finished}
        for directory in directories:
            if directory.exists():
                fsync_dir(directory)
        self._renamed_into.clear()

    # ------------------------------------------------------------------ driver, outside a commit

    def abort(self, record: PartRecord) -> None:
        if record.in_place:
            truncate_to(self._path(record.path), record.base_length)
        else:
            self._path(record.path).unlink(missing_ok=True)

    def sweep_finished(self, finished: Iterable[PartRecord]) -> list[str]:
        """Nothing: a local attempt writes only its part file, cut back or removed by name."""
        return []

    def sweep(self, *, ours: Callable[[str], bool], keep: Iterable[PartRecord]) -> list[str]:
        """Delete hidden files ``ours`` accepts that ``keep`` does not name (the metadata
        directories at the root are not walked)."""
        kept = {record.path for record in keep}
        removed = []
        root = self.storage.root
        for directory, subdirs, files in os.walk(root):
            if directory == str(root):
                subdirs[:] = [d for d in subdirs if not d.startswith("_")]
            for name in files:
                if name.startswith(".") and ours(name):
                    path = Path(directory, name)
                    key = os.path.relpath(path, root)
                    if key not in kept:
                        path.unlink(missing_ok=True)
                        removed.append(key)
        return removed
