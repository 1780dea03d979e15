"""Both storage seams in memory (as fsspec's memory file system), for tests in one process.

``memory://<name>/<prefix>`` names a store that :func:`register_memory_store` created in this
process: metadata objects (:class:`MemoryStorage`) and part files
(:class:`MemoryRecoverableWriter`, the local file system's protocol on a dict: a hidden key
written in place, cut back, renamed by a commit). The file sink's protocol and its crash cases
then run without Spark or a disk, in milliseconds (tests/files/test_file_sink_in_memory.py and
the conformance matrix's ``memory`` store).

Nothing outside this process sees a memory store: in Spark its executors are other processes,
so a ``memory://`` path is refused there (the store is not registered in that process), never
taken for an empty store.
"""

from __future__ import annotations

import builtins
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, BinaryIO

from sparklink.errors import CommitError, StorageError
from sparklink.storage.base import FileStorage, ObjectInfo, StoredBytes
from sparklink.storage.recoverable import PartRecord, PartStream, RecoverableWriter


@dataclass
class _Object:
    data: bytearray
    version: int
    modified_at: float


@dataclass
class _Store:
    objects: dict[str, _Object] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    clock: float = 1_700_000_000.0  # a clock that ticks once per write: modification times are distinct
    versions: int = 0
    key_locks: dict[str, threading.Lock] = field(default_factory=dict)

    def stamp(self) -> tuple[int, float]:
        self.versions += 1
        self.clock += 0.001
        return self.versions, self.clock


_STORES: dict[str, _Store] = {}


def register_memory_store(name: str) -> str:
    """Create (empty) the memory store ``name`` in this process; returns its root URI."""
    _STORES[name] = _Store()
    return f"memory://{name}"


def drop_memory_store(name: str) -> None:
    _STORES.pop(name, None)


def is_registered(name: str) -> bool:
    return name in _STORES


def memory_store(name: str) -> _Store:
    store = _STORES.get(name)
    if store is None:
        raise StorageError(f"memory://{name} is not a memory store of this process (a memory store serves tests in "
                           "one process: Spark's executors cannot see it)")
    return store


class MemoryStorage(FileStorage):
    """Objects of memory store ``name`` under ``prefix``."""

    def __init__(self, name: str, prefix: str = ""):
        self.name = name
        self.prefix = prefix.strip("/")
        self.store = memory_store(name)

    def _key(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix and key else (self.prefix or key)

    def describe(self) -> str:
        return f"memory store {self.uri('')}"

    def uri(self, key: str) -> str:
        return f"memory://{self.name}/{self._key(key)}"

    def read(self, key: str) -> StoredBytes | None:
        with self.store.lock:
            found = self.store.objects.get(self._key(key))
            return None if found is None else StoredBytes(data=bytes(found.data), version=str(found.version))

    def _put(self, key: str, data: bytes) -> str:
        version, now = self.store.stamp()
        self.store.objects[self._key(key)] = _Object(data=bytearray(data), version=version, modified_at=now)
        return str(version)

    def create_if_absent(self, key: str, data: bytes) -> str | None:
        with self.store.lock:
            return None if self._key(key) in self.store.objects else self._put(key, data)

    def replace(self, key: str, data: bytes, *, expected_version: str) -> str | None:
        with self.store.lock:
            found = self.store.objects.get(self._key(key))
            if found is None or str(found.version) != expected_version:
                return None
            return self._put(key, data)

    def put(self, key: str, data: bytes) -> str:
        with self.store.lock:
            return self._put(key, data)

    def info(self, key: str) -> ObjectInfo | None:
        with self.store.lock:
            found = self.store.objects.get(self._key(key))
            return None if found is None else ObjectInfo(key=key, size=len(found.data), modified_at=found.modified_at,
                                                         version=str(found.version))

    def list(self, prefix: str = "", *, start_after: str | None = None,
             read_ahead: bool = False) -> Iterator[ObjectInfo]:
        root = f"{self.prefix}/" if self.prefix else ""
        with self.store.lock:
            keys = sorted(k[len(root):] for k in self.store.objects if k.startswith(root + prefix))
        for key in keys:
            if start_after is None or key > start_after:
                found = self.info(key)
                if found is not None:
                    yield found

    def open_input(self, key: str) -> Any:
        import pyarrow as pa

        stored = self.read(key)
        if stored is None:
            raise FileNotFoundError(self.uri(key))
        return pa.BufferReader(stored.data)

    def names(self, directory: str, prefix: str = "") -> builtins.list[str]:
        base = f"{directory}/" if directory else ""
        return [info.key[len(base):] for info in self.list(base + prefix) if "/" not in info.key[len(base):]]

    def delete(self, key: str) -> None:
        with self.store.lock:
            self.store.objects.pop(self._key(key), None)

    def exclusive(self, key: str) -> Any:
        with self.store.lock:
            lock = self.store.key_locks.setdefault(self._key(key), threading.Lock())
        return lock

    def check_conditional_writes(self) -> None:
        """Always honoured (one lock)."""

    # the part files' raw access (the recoverable writer's)

    def _buffer(self, key: str) -> bytearray | None:
        found = self.store.objects.get(self._key(key))
        return None if found is None else found.data


class _MemoryStream(PartStream):
    """A part file written in place in the store (executor side, in this process)."""

    def __init__(self, record: PartRecord, storage: MemoryStorage, buffer: bytearray):
        self.record = record
        self.storage = storage
        self.buffer = buffer
        self._target: _BufferFile | None = None

    def write(self, data: bytes | memoryview) -> None:
        self.buffer += data

    def tell(self) -> int:
        return len(self.buffer)

    def bulk_target(self) -> BinaryIO:
        self._target = _BufferFile(self.buffer)
        return self._target  # type: ignore[return-value]

    def close(self) -> None:
        self.record.length = len(self.buffer)

    def persist(self, owner: str) -> None:
        self.record.length = len(self.buffer)

    def discard(self) -> None:
        """Nothing to release."""


class _BufferFile:
    """A write-only file object over a bytearray (what a bulk writer writes to)."""

    closed = False

    def __init__(self, buffer: bytearray):
        self.buffer = buffer

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        self.buffer += view
        return len(view)

    def tell(self) -> int:
        return len(self.buffer)

    def flush(self) -> None:
        """Nothing is buffered."""

    def writable(self) -> bool:
        return True

    def close(self) -> None:
        self.closed = True


class MemoryRecoverableWriter(RecoverableWriter):
    """Part files of a :class:`MemoryStorage`: the local protocol (hidden key, cut back, rename)."""

    storage: MemoryStorage

    def __init__(self, storage: MemoryStorage):
        self.storage = storage

    def _new(self, key: str, data: bytes = b"") -> bytearray:
        with self.storage.store.lock:
            self.storage._put(key, data)
            return self.storage.store.objects[self.storage._key(key)].data

    def open(self, record: PartRecord, *, direct: bool = False) -> PartStream:
        return _MemoryStream(record, self.storage, self._new(record.path))

    def resumes_in_place(self, attempt: int) -> bool:
        return attempt == 0

    def resume(self, record: PartRecord, base: PartRecord, *, attempt: int) -> PartStream:
        with self.storage.store.lock:
            carried = self.storage._buffer(base.path)
        if carried is None or len(carried) < base.length:
            raise OSError(f"carried in-progress file {self.storage.uri(base.path)} is shorter than the {base.length} "
                          "bytes the last commit recorded")
        if record.path == base.path:
            del carried[base.length:]
            return _MemoryStream(record, self.storage, carried)
        return _MemoryStream(record, self.storage, self._new(record.path, bytes(carried[:base.length])))

    def _cut(self, key: str, length: int) -> bool:
        buffer = self.storage._buffer(key)
        if buffer is None:
            return False
        if len(buffer) < length:
            raise CommitError(f"in-progress file {self.storage.uri(key)} holds {len(buffer)} bytes, fewer than the "
                              f"{length} the last commit recorded")
        del buffer[length:]
        return True

    def commit(self, record: PartRecord) -> bool:
        store = self.storage.store
        with store.lock:
            source, target = self.storage._key(record.path), self.storage._key(record.final)
            if source in store.objects:
                if target in store.objects:
                    raise CommitError(f"cannot finish {self.storage.uri(record.path)}: the finished file "
                                      f"{self.storage.uri(record.final)} already exists and is never overwritten")
                self._cut(record.path, record.length)
                store.objects[target] = store.objects.pop(source)
                return True
            if target in store.objects:
                return False
        raise CommitError(f"pending file {self.storage.uri(record.path)} is gone and {self.storage.uri(record.final)} "
                          "does not exist")

    def commit_hidden(self, record: PartRecord) -> None:
        with self.storage.store.lock:
            self._cut(record.path, record.length)

    def cut_back(self, record: PartRecord) -> None:
        with self.storage.store.lock:
            if not self._cut(record.path, record.length):
                raise CommitError(f"in-progress file {self.storage.uri(record.path)} recorded by the last commit is gone")

    def is_committed(self, record: PartRecord) -> bool:
        return self.storage.info(record.path) is None and self.storage.info(record.final) is not None

    def clean_after_commit(self, finished: Iterable[PartRecord], carried: Iterable[PartRecord]) -> None:
        """Nothing: a rename in memory is durable at once."""

    def abort(self, record: PartRecord) -> None:
        if record.in_place:
            with self.storage.store.lock:
                buffer = self.storage._buffer(record.path)
                if buffer is not None:
                    del buffer[record.base_length:]
        else:
            self.storage.delete(record.path)

    def sweep(self, *, ours: Callable[[str], bool], keep: Iterable[PartRecord]) -> builtins.list[str]:
        kept = {record.path for record in keep}
        removed = []
        for info in list(self.storage.list()):
            name = info.key.rpartition("/")[2]
            if not info.key.startswith("_") and name.startswith(".") and ours(name) and info.key not in kept:
                self.storage.delete(info.key)
                removed.append(info.key)
        return removed

    def sweep_finished(self, finished: Iterable[PartRecord]) -> builtins.list[str]:
        return []

