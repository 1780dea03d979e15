"""How each store names its files as Hadoop-style URIs (``file:///abs/path``, ``s3a://bucket/key``),
the spelling Spark's file sink log (``_spark_metadata``) and Spark's readers use: the store
question behind those names, answered here so that no connector asks it (ARCHITECTURE.md, "No
store question above ``storage/``"). Runs wherever it is called (driver or executor).

``what`` names the file that holds the URIs, for messages (``_spark_metadata``).
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import quote, unquote, urlparse

from sparklink.errors import DataError
from sparklink.storage.base import FileStorage
from sparklink.storage.location import S3_SCHEMES, SCHEME_FILE, scheme_of


def uri_of(path: Path) -> str:
    """``file:///abs/path`` with the characters a URI may not hold escaped (Spark parses it with java.net.URI)."""
    return "file://" + quote(str(Path(path).absolute()))


def local_path_of(uri: str, *, what: str) -> str:
    """The local path a ``file:`` URI (or an absolute path) names; a URI of another scheme is
    refused, never guessed."""
    parsed = urlparse(uri)
    if parsed.scheme == SCHEME_FILE and parsed.netloc in ("", "localhost"):
        return unquote(parsed.path)
    if not parsed.scheme and uri.startswith("/"):
        return uri
    raise DataError(f"{what} names '{uri}', which is not a local file (scheme '{parsed.scheme}'); "
                    "sparklink reads local paths only")


def uri_in(storage: FileStorage, relative: str) -> str:
    """The URI of ``relative`` under ``storage``: a storage naming keys by URI keeps its scheme
    (``s3a://bucket/key``, ``s3://bucket/key``), a local path becomes a ``file://`` URI; the path
    part is escaped as Hadoop's ``Path.toUri`` escapes it."""
    name = storage.uri(relative)
    scheme = scheme_of(name)
    if scheme is None:
        return uri_of(Path(name))
    authority, _, path = name[len(scheme) + 3:].partition("/")
    return f"{scheme}://{authority}/{quote(path)}"


def relative_in(storage: FileStorage, uri: str, *, what: str) -> str | None:
    """The key under ``storage`` that ``uri`` names (``s3`` and ``s3a`` name the same objects),
    None if it names a file elsewhere. A URI of a scheme the storage does not serve is refused."""
    parsed = urlparse(uri)
    root = storage.uri("")
    root_scheme = scheme_of(root)
    if root_scheme is None:
        path = local_path_of(uri, what=what)
        base = str(Path(root).absolute())
        relative = os.path.relpath(path, base)
        return None if relative == ".." or relative.startswith("../") else relative.replace(os.sep, "/")
    served = S3_SCHEMES if root_scheme in S3_SCHEMES else (root_scheme,)
    if parsed.scheme.lower() not in served:
        raise DataError(f"{what} names '{uri}' (scheme '{parsed.scheme}'), but the output is {storage.describe()}")
    authority, _, root_path = root[len(root_scheme) + 3:].partition("/")
    if parsed.netloc != authority:
        return None
    path = unquote(parsed.path).lstrip("/")
    if root_path and not path.startswith(root_path):
        return None
    return path[len(root_path):] if root_path else path


def in_spelling_of(spelled: str, uri: str) -> str:
    """``uri`` spelled with the scheme of ``spelled`` when both name the same store under two
    spellings (``s3a://`` and ``s3://``); else ``uri`` as it is. An output started as
    ``s3a://`` and finished as ``s3://`` (or the reverse) keeps one spelling in its log."""
    theirs, ours = scheme_of(spelled), scheme_of(uri)
    if theirs == ours or theirs not in S3_SCHEMES or ours not in S3_SCHEMES or ours is None:
        return uri
    return theirs + uri[len(ours):]
