"""A flat directory of small metadata objects on a :class:`FileStorage` (driver side).

The commit log (``_sparklink/commits``), the file sink's state files (``_sparklink/state``) and
the owner claim (``_sparklink/owner.json``) are such objects. :func:`as_directory` accepts a
local path (the SDK's sinks name their log directory by path) or a :class:`StorageDirectory`
built on any storage, so the metadata code is written once for local disk and S3.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from sparklink.storage.base import FileStorage, StoredBytes
from sparklink.storage.local import LocalStorage


@dataclass(frozen=True)
class StorageDirectory:
    """Objects named ``<prefix>/<name>`` on ``storage`` (``prefix`` "" is the storage's root)."""

    storage: FileStorage
    prefix: str = ""

    def key(self, name: str) -> str:
        return f"{self.prefix}/{name}" if self.prefix else name

    def uri(self, name: str) -> str:
        return self.storage.uri(self.key(name))

    def describe(self) -> str:
        return self.storage.uri(self.prefix) if self.prefix else self.storage.describe()

    def local_path(self) -> Path | None:
        """The directory's path when it is on the local file system, else None."""
        if isinstance(self.storage, LocalStorage):
            return self.storage.path(self.prefix) if self.prefix else self.storage.root
        return None

    def names(self) -> list[str]:
        return self.storage.names(self.prefix)

    def read(self, name: str) -> StoredBytes | None:
        return self.storage.read(self.key(name))

    def create_if_absent(self, name: str, data: bytes) -> str | None:
        return self.storage.create_if_absent(self.key(name), data)

    def replace(self, name: str, data: bytes, *, expected_version: str) -> str | None:
        return self.storage.replace(self.key(name), data, expected_version=expected_version)

    def put(self, name: str, data: bytes) -> str:
        return self.storage.put(self.key(name), data)

    def delete(self, name: str) -> None:
        self.storage.delete(self.key(name))

    def total_bytes(self) -> int:
        return sum(info.size for info in self.storage.list(f"{self.prefix}/" if self.prefix else ""))


@dataclass(frozen=True)
class StorageFile:
    """One metadata object: ``name`` in ``directory`` (e.g. the owner claim)."""

    directory: StorageDirectory
    name: str

    def uri(self) -> str:
        return self.directory.uri(self.name)


def as_directory(directory: str | os.PathLike[str] | StorageDirectory) -> StorageDirectory:
    """``directory`` as a :class:`StorageDirectory` (a local path: on a :class:`LocalStorage`)."""
    if isinstance(directory, StorageDirectory):
        return directory
    return StorageDirectory(LocalStorage(directory))
