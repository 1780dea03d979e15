"""Data files a task writes in one go at their final key (executor side): a table format's
data file, which no reader takes until the driver's commit names it (Delta's log; Iceberg's
manifests). One implementation per store: a local file written in place
(:class:`~sparklink.storage.local.LocalNewFile`), one S3 multipart upload completed when the
file is finished (:class:`~sparklink.storage.multipart_file.MultipartNewFile`).
"""

from __future__ import annotations

from sparklink.errors import ConfigError
from sparklink.storage.base import FileStorage, NewFile
from sparklink.storage.local import LocalNewFile, LocalStorage


def create_file(storage: FileStorage, key: str) -> NewFile:
    """A new data file at ``key`` of ``storage``; a store that does not serve it is refused."""
    if isinstance(storage, LocalStorage):
        return LocalNewFile(key, storage.path(key))
    from sparklink.storage.s3 import S3Storage

    if isinstance(storage, S3Storage):
        from sparklink.storage.multipart_file import MultipartNewFile

        return MultipartNewFile(storage, key)
    raise ConfigError("path", f"{storage.describe()}: data files of a table are written to a local directory or S3 only")
