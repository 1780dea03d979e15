"""Where a file connector's ``path`` points: a local directory or an S3 bucket and prefix.

Runs on the driver when a query or a ``spark.read`` / ``df.write`` starts, once per path
option. Served: a plain local path, a ``file:`` URI, and ``s3://bucket/prefix`` /
``s3a://bucket/prefix`` (``s3a`` is how Spark users write S3 paths; both name the same
object). Any other ``scheme:/...`` path (``hdfs://``, ``gs://``, ``abfss://`` ...) is refused
with an error naming the scheme and the schemes served. No path is ever taken as a relative
local path when it names a scheme: ``Path("s3://acc/out")`` would be ``s3:/acc/out`` under the
working directory and write every row to local disk while the user believes it went to S3.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath
from typing import TypeVar

from sparklink.errors import ConfigError

SCHEME_FILE = "file"
SCHEME_S3 = "s3"
SCHEME_S3A = "s3a"
SCHEME_MEMORY = "memory"  # served only for a memory store registered in this process (tests)
S3_SCHEMES = (SCHEME_S3, SCHEME_S3A)
SERVED_SCHEMES = (SCHEME_FILE,) + S3_SCHEMES
SERVED_TEXT = ", ".join(f"{s}://" for s in SERVED_SCHEMES) + " or a plain local path"
_SCHEME = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*):/")
_FILE_URI = re.compile(r"^file:(?://(?P<host>[^/]*))?(?P<path>/.*)$", re.IGNORECASE)
_S3_URI = re.compile(r"^(?P<scheme>s3a?)://(?P<bucket>[^/]*)(?P<key>/.*)?$", re.IGNORECASE)
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_LOCAL_HOSTS = ("", "localhost")

# How a reader best reads each store, said by its location (class attributes) so that no
# connector asks which store a path is on (ARCHITECTURE.md, "No store question above storage/"):
#
# ``KEY_LISTING``: the store is one flat key space, listed in ascending key order and resumable
#   after a key (``FileStorage.list(start_after=...)``, ListObjectsV2's ``StartAfter``), whose
#   objects carry the time their write started (an object may show in listings later than
#   that time). False: a directory tree a reader walks, where a file's change time is the time
#   it became visible (a rename sets it).
# ``READ_AHEAD``: each open and read of an object is a request (a HEAD, ranged GETs), so a
#   reader fetches small objects whole ahead of the decoder and large ones in blocks ahead of
#   it. False: reads are local (the page cache answers).


@dataclass(frozen=True, kw_only=True)
class LocalLocation:
    """A directory on the local file system (or a shared mount every executor sees)."""

    path: str
    STORE = "local paths"
    SHARED = True  # other processes of the job (executors) see it
    KEY_LISTING = False
    READ_AHEAD = False

    def uri(self) -> str:
        return self.path

    def parent(self) -> tuple["LocalLocation", str] | None:
        """The directory holding this path and this path's name; None for the root."""
        path = PurePosixPath(self.path)
        return None if path.parent == path else (LocalLocation(path=str(path.parent)), path.name)

    def is_empty_directory(self) -> bool:
        """Whether the location exists though nothing is listed under it (an empty directory)."""
        return Path(self.path).is_dir()


@dataclass(frozen=True, kw_only=True)
class S3Location:
    """``bucket`` and ``prefix`` (no leading or trailing ``/``; empty for the bucket's root)."""

    scheme: str
    bucket: str
    prefix: str
    STORE = "S3 prefixes"
    SHARED = True
    KEY_LISTING = True
    READ_AHEAD = True

    def uri(self) -> str:
        return f"{self.scheme}://{self.bucket}/{self.prefix}" if self.prefix else f"{self.scheme}://{self.bucket}"

    def parent(self) -> tuple["S3Location", str] | None:
        """The prefix one segment up and the last segment (the name of the object this
        location would be if it names one); None for the bucket's root."""
        return _prefix_parent(self)

    def key(self, relative: str) -> str:
        """The object key of ``relative`` (a ``/``-separated path under this location)."""
        return f"{self.prefix}/{relative}" if self.prefix else relative

    def is_empty_directory(self) -> bool:
        """False: a prefix under which nothing is listed does not exist."""
        return False


@dataclass(frozen=True, kw_only=True)
class MemoryLocation:
    """``memory://name/prefix``: a memory store of this process (tests; see
    :mod:`sparklink.storage.memory`)."""

    name: str
    prefix: str
    STORE = "memory stores"
    SHARED = False  # this process only
    KEY_LISTING = True  # a flat key space listed in key order (objects are visible at their time)
    READ_AHEAD = False

    def uri(self) -> str:
        return f"memory://{self.name}/{self.prefix}" if self.prefix else f"memory://{self.name}"

    def parent(self) -> tuple["MemoryLocation", str] | None:
        """The prefix one segment up and the last segment; None for the store's root."""
        return _prefix_parent(self)

    def is_empty_directory(self) -> bool:
        """False: a prefix under which nothing is listed does not exist."""
        return False


Location = LocalLocation | S3Location | MemoryLocation


def scheme_of(path: str) -> str | None:
    """The lower-cased scheme ``path`` names (``s3`` for ``s3://b/x`` and ``S3:/b/x``), None for a
    plain path."""
    match = _SCHEME.match(path)
    return match.group("scheme").lower() if match else None


def local_file_path(path: str) -> str | None:
    """The local file ``path`` names (a plain path, made absolute, or a ``file:`` URI with no
    host or ``localhost``), or None for anything else (another scheme, a remote host): for
    readers that serve local files themselves and hand every other location to a library."""
    if _SCHEME.match(path) is None:
        return os.path.abspath(path)
    return _local_file_uri_path(path)


def _local_file_uri_path(path: str) -> str | None:
    """The path of a ``file:`` URI with no host or ``localhost``; None for any other string."""
    uri = _FILE_URI.match(path)
    if uri is None or (uri.group("host") or "").lower() not in _LOCAL_HOSTS:
        return None
    return uri.group("path")


def parse_location(option: str, path: str) -> Location:
    """``path`` as a served location; ConfigError naming ``option``, the scheme and the schemes
    served for anything else (driver side, at query start)."""
    match = _SCHEME.match(path)
    if match is None:
        return LocalLocation(path=path)
    scheme = match.group("scheme").lower()
    if scheme == SCHEME_FILE:
        local = _local_file_uri_path(path)
        if local is None:
            raise ConfigError(option, f"'{path}' is not a local file URI", "file:///absolute/path or a plain local path")
        return LocalLocation(path=local)
    if scheme in S3_SCHEMES:
        return _s3_location(option, path)
    if scheme == SCHEME_MEMORY:
        return _memory_location(option, path)
    raise ConfigError(option, f"'{path}': scheme '{scheme}://' is not served by the file connectors; a path is never "
                      "taken as a local path when it names another scheme", SERVED_TEXT)


def _s3_location(option: str, path: str) -> S3Location:
    uri = _S3_URI.match(path)
    bucket = uri.group("bucket") if uri else ""
    if uri is None or not _BUCKET.match(bucket) or ".." in bucket:
        raise ConfigError(option, f"'{path}' does not name an S3 bucket (3 to 63 lower-case letters, digits, '.' "
                          "or '-')", "s3://bucket/prefix")
    key = (uri.group("key") or "/")[1:].rstrip("/")
    if key and any(part in ("", ".", "..") for part in key.split("/")):
        raise ConfigError(option, f"'{path}': the prefix has an empty, '.' or '..' segment", "s3://bucket/prefix")
    return S3Location(scheme=uri.group("scheme").lower(), bucket=bucket, prefix=key)


def _memory_location(option: str, path: str) -> MemoryLocation:
    from sparklink.storage.memory import is_registered

    name, _, prefix = path[len("memory://"):].partition("/")
    if not is_registered(name):
        raise ConfigError(option, f"'{path}': memory store '{name}' does not exist in this process (memory:// serves "
                          "tests in one process; Spark's executors cannot see it)", SERVED_TEXT)
    return MemoryLocation(name=name, prefix=prefix.strip("/"))


def parse_one_store(named: Sequence[tuple[str, str]], *, reader: str, option: str) -> tuple[Location, ...]:
    """Each ``(option, path)`` of ``named`` as a served location (:func:`parse_location`), for a
    ``reader`` that plans in the driver and reads in executors (other processes): a store only
    this process sees is refused naming its option, and so is a mix of stores (named by
    ``option``): one reader reads one store (driver side, at query start)."""
    locations = [(key, parse_location(key, path)) for key, path in named]
    for key, location in locations:
        if not location.SHARED:
            raise ConfigError(key, f"'{location.uri()}': {reader} reads {LocalLocation.STORE} and {S3Location.STORE}, "
                              f"not {location.STORE} (it plans in the driver and reads in executors, other processes)")
    stores = {location.STORE for _, location in locations}
    if len(stores) > 1:
        order = [LocalLocation.STORE, S3Location.STORE, MemoryLocation.STORE]
        kinds = " and ".join(f"{store} (" + ", ".join(loc.uri() for _, loc in locations if loc.STORE == store) + ")"
                             for store in sorted(stores, key=order.index))
        raise ConfigError(option, f"mixes {kinds}; one source reads one kind: use two sources and union them")
    return tuple(location for _, location in locations)


_Prefixed = TypeVar("_Prefixed", "S3Location", "MemoryLocation")


def _prefix_parent(location: _Prefixed) -> tuple[_Prefixed, str] | None:
    """For a key-prefix location (S3, memory): the same location one segment up and the last
    segment; None at the root."""
    if not location.prefix:
        return None
    parent, _, name = location.prefix.rpartition("/")
    return replace(location, prefix=parent), name
