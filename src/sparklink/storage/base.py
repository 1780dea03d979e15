"""The file-I/O seam of the file connectors (as pyiceberg's ``FileIO``).

The sink's and the source's protocol code is written once against :class:`FileStorage`; the
local file system (:mod:`sparklink.storage.local`) and S3
(:mod:`sparklink.storage.s3`) differ behind it. Objects are named by *keys*: paths
relative to the connector's ``path``, ``/``-separated (``_sparklink/commits/3.json``,
``dt=2024-01-01/part-...``).

Every object carries a *version* (S3: its ETag; local disk: modification time and size), so a
metadata file is replaced only if nobody changed it since it was read (``If-Match``), and
created only if it does not exist (``If-None-Match: *``). A storage object is built where it
is used (driver or executor) and holds a live client: never pickle it, pickle its location and
config and build it again.
"""

from __future__ import annotations

import builtins
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO


@dataclass(frozen=True, kw_only=True)
class ObjectInfo:
    """One object (file): its key, size in bytes, modification time (epoch seconds), version."""

    key: str
    size: int
    modified_at: float
    version: str


@dataclass(frozen=True, kw_only=True)
class StoredBytes:
    """The whole content of a small object (metadata) and the version it was read at."""

    data: bytes
    version: str


class FileStorage(ABC):
    """Small-object and listing operations shared by the local file system and S3."""

    @abstractmethod
    def describe(self) -> str:
        """Where the objects live, for messages (an S3 endpoint never carries a secret)."""

    @abstractmethod
    def uri(self, key: str) -> str:
        """The full path or URI of ``key`` (``/data/out/x`` or ``s3://bucket/prefix/x``)."""

    @abstractmethod
    def read(self, key: str) -> StoredBytes | None:
        """The content and version of ``key``; None if it does not exist."""

    @abstractmethod
    def create_if_absent(self, key: str, data: bytes) -> str | None:
        """Create ``key`` holding ``data`` if no object has that key: the new object's version
        if this call created it, None if it existed. Readers see the whole object or none."""

    @abstractmethod
    def replace(self, key: str, data: bytes, *, expected_version: str) -> str | None:
        """Overwrite ``key`` if its version is still ``expected_version``: the new version if
        replaced, None if the object changed (or vanished) since that version."""

    @abstractmethod
    def put(self, key: str, data: bytes) -> str:
        """Write ``key`` whole, replacing any earlier content (readers see old or new); its new
        version."""

    @abstractmethod
    def info(self, key: str) -> ObjectInfo | None:
        """Size, time and version of ``key``; None if it does not exist."""

    @abstractmethod
    def list(self, prefix: str = "", *, start_after: str | None = None,
             read_ahead: bool = False) -> Iterator[ObjectInfo]:
        """Every object whose key starts with ``prefix``, recursively, in ascending key order
        (as ``ListObjectsV2``), only keys after ``start_after`` when it is given. ``read_ahead``:
        the caller reads to the end, so a store that lists in pages may request the next page
        while the caller goes through the current one (others ignore it)."""

    @abstractmethod
    def open_input(self, key: str) -> Any:
        """``key`` as a random-access ``pyarrow.NativeFile`` (S3: each read is a ranged GET), for
        pyarrow's readers; FileNotFoundError if it does not exist."""

    @abstractmethod
    def names(self, directory: str, prefix: str = "") -> builtins.list[str]:
        """Names of the objects directly under ``directory`` (a key without the trailing ``/``;
        ``""`` for the root) that start with ``prefix``, unsorted; empty if there are none (S3:
        one listing of exactly that key prefix, so the cost follows the matching names)."""

    @abstractmethod
    def delete(self, key: str) -> None:
        """Remove ``key``; nothing happens if it does not exist."""

    @abstractmethod
    def exclusive(self, key: str) -> Any:
        """A context manager holding this store's exclusive lock of ``key`` for one step (local
        disk: a lock file ``<key without suffix>.lock`` beside it; stores without locks: no-op,
        the conditional writes alone fence writers)."""

    @abstractmethod
    def check_conditional_writes(self) -> None:
        """Refuse (ConfigError) a store that does not honour :meth:`create_if_absent` and
        :meth:`replace`'s conditions (driver side, once per query start)."""

    def object_store_options(self) -> dict[str, str] | None:
        """The settings of the Rust ``object_store`` crate (delta-rs) that reach this store, built
        on each call (short-lived credentials stay fresh); None for a store that needs none (a
        local directory). Holds secrets: never log or show it."""
        return None


class NewFile(ABC):
    """A file written once by one task at its final key (:func:`sparklink.storage.new_file.create_file`):
    write to :attr:`target` (what pyarrow's writers take), then :meth:`finish` it once the
    writer closed it, or :meth:`discard` it (a failing task). Executor side."""

    key: str

    @property
    @abstractmethod
    def target(self) -> Path | BinaryIO:
        """What a writer writes to: a local path, or a write-only file object."""

    @abstractmethod
    def finish(self) -> float:
        """The writer closed it: make it whole at its key (S3: complete the upload); its
        modification time (epoch seconds)."""

    @abstractmethod
    def discard(self) -> None:
        """Remove whatever was written (S3: abort the upload, or delete the completed object)."""
