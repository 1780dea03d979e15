"""The file connectors' one file-I/O seam: the local file system and S3 behind one interface.

:func:`parse_location` turns a ``path`` option into a :class:`LocalLocation` or an
:class:`S3Location` (refusing every scheme it does not serve); :func:`open_storage` builds the
:class:`FileStorage` for it, where it is used (driver or executor; never pickled).
"""

from __future__ import annotations

from collections.abc import Mapping

from sparklink.storage.base import FileStorage, ObjectInfo, StoredBytes
from sparklink.storage.local import LocalStorage
from sparklink.storage.location import (
    SERVED_SCHEMES,
    LocalLocation,
    Location,
    MemoryLocation,
    S3Location,
    parse_location,
)
from sparklink.storage.s3_config import S3_OPTIONS, S3Config, without_secrets

__all__ = ["FileStorage", "LocalLocation", "LocalStorage", "Location", "ObjectInfo", "S3Config", "S3Location",
           "S3_OPTIONS", "SERVED_SCHEMES", "StoredBytes", "open_storage", "parse_location", "without_secrets"]


def open_storage(location: Location, options: Mapping[str, str] | None = None) -> FileStorage:
    """The storage of ``location``; S3 settings come from ``options`` and the AWS environment."""
    if isinstance(location, LocalLocation):
        return LocalStorage(location.path)
    if isinstance(location, MemoryLocation):
        from sparklink.storage.memory import MemoryStorage

        return MemoryStorage(location.name, location.prefix)
    from sparklink.storage.s3 import S3Storage

    return S3Storage(location, S3Config.from_options(options))
