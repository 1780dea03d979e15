"""Opening a listed file for reading: a local path or an ``s3://`` / ``s3a://`` object URI.

Executor side (once per segment) and driver side (schema inference, Parquet footers while
planning splits). The formats name files by the path the enumerator listed; this module is
the one place that turns such a path into bytes, so the formats are written once for local
disk and S3:

* local paths are opened as before (Python's ``open``, or the path itself for pyarrow's
  Parquet / ORC readers, which memory-map it);
* S3 objects are opened through the storage seam
  (:meth:`~sparklink.storage.s3.S3Storage.open_input`): a random-access file whose reads
  are ranged GETs. Python-level readers (text lines, CSV headers, Avro) get it behind a
  1 MiB read buffer, so a reader that reads a few bytes at a time costs one GET per MiB, not
  one per read; pyarrow's readers (Parquet, ORC, compressed streams) get it as is and fetch
  the byte ranges they need.

The split reader may serve an object from memory instead (:func:`serving`): the bytes of a
small object it prefetched whole (:mod:`~sparklink.files.source.prefetch`), which the formats
then read as a ``pyarrow.BufferReader``.

One S3 client and one pyarrow S3 file system per process and settings, the ones the sink's
storage uses too (:meth:`~sparklink.storage.s3_config.S3Config.shared_client`,
:meth:`~sparklink.storage.s3_config.S3Config.shared_arrow_filesystem`: both are expensive to
build, and never pickled).
"""

from __future__ import annotations

import io
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sparklink.storage.base import FileStorage
from sparklink.storage.location import S3_SCHEMES, Location, S3Location, scheme_of
from sparklink.storage.s3_config import S3Config

READ_BUFFER_BYTES = 1024 * 1024  # per Python-level read of an S3 object: the size of one ranged GET


def is_object_uri(path: str) -> bool:
    """True for ``s3://`` and ``s3a://`` paths."""
    return scheme_of(path) in S3_SCHEMES


class _Served(threading.local):
    def __init__(self) -> None:
        self.objects: dict[str, Any] = {}  # path -> its bytes (a pyarrow.Buffer) or a ReadAhead


_served = _Served()


@contextmanager
def serving(path: str, source: Any) -> Iterator[None]:
    """Within the block, this thread's opens of the object ``path`` read ``source``: its bytes
    (a ``pyarrow.Buffer`` of the whole object), or a
    :class:`~sparklink.files.source.prefetch.ReadAhead` that reads it from the store ahead of
    the decoder. Executor side, around one segment's read."""
    _served.objects[path] = source
    try:
        yield
    finally:
        _served.objects.pop(path, None)


def reading_storage(location: Location, s3: S3Config | None) -> FileStorage:
    """The storage a reader lists and opens ``location`` through: an S3 prefix on this process's
    shared client for ``s3`` (the reader's settings, :func:`~sparklink.storage.s3_config.settings_for`),
    any other store as :func:`~sparklink.storage.open_storage` opens it."""
    if not isinstance(location, S3Location):
        from sparklink.storage import open_storage

        return open_storage(location)
    from sparklink.storage.s3 import S3Storage

    settings = _settings(location.uri(), s3)
    return S3Storage(location, settings, shared=True)


def _settings(path: str, config: S3Config | None) -> S3Config:
    if config is None:
        raise ValueError(f"{path}: an S3 object is read with the source's S3 settings, none given")
    return config


def whole_object(path: str, s3: S3Config | None) -> Any:
    """All bytes of the object ``path`` names (a ``pyarrow.Buffer``): its current length (a
    HEAD), then one GET; what a reader fetches ahead of the decoder
    (:class:`~sparklink.files.source.prefetch.ObjectPrefetch`). Executor side."""
    with _settings(path, s3).shared_arrow_filesystem().open_input_file(path.partition("://")[2]) as handle:
        return handle.read_buffer()


def _open_object(path: str, config: S3Config | None) -> tuple[Any, str]:
    """The object ``path`` names, and how it is held: ``"memory"`` (a ``pyarrow.BufferReader``
    of the bytes :func:`serving` gave), ``"read-ahead"`` (a Python file reading ahead of its
    reader) or ``"native"`` (pyarrow's random-access S3 file: ranged GETs as reads come)."""
    _settings(path, config)
    import pyarrow as pa

    served = _served.objects.get(path)
    if isinstance(served, pa.Buffer):
        return pa.BufferReader(served), "memory"
    scheme, _, rest = path.partition("://")
    bucket, _, key = rest.partition("/")
    native = reading_storage(S3Location(scheme=scheme.lower(), bucket=bucket, prefix=""), config).open_input(key)
    if served is not None:
        return served.open(native), "read-ahead"
    return native, "native"


@contextmanager
def open_binary(path: str, s3: S3Config | None) -> Iterator[Any]:
    """``path`` as a readable, seekable binary file object (``read``, ``seek``, ``tell``)."""
    if not is_object_uri(path):
        with open(path, "rb") as handle:
            yield handle
        return
    raw, held = _open_object(path, s3)
    try:
        yield raw if held == "memory" else io.BufferedReader(raw, buffer_size=READ_BUFFER_BYTES)
    finally:
        raw.close()


@contextmanager
def arrow_input(path: str, s3: S3Config | None) -> Iterator[Any]:
    """What pyarrow's readers take: the path itself when local (they open and memory-map it),
    a random-access ``NativeFile`` for an S3 object (closed on exit)."""
    if not is_object_uri(path):
        yield path
        return
    import pyarrow as pa

    raw, held = _open_object(path, s3)
    try:
        yield pa.PythonFile(raw, mode="r") if held == "read-ahead" else raw
    finally:
        raw.close()
