"""The path schemes the file connectors serve, and the refusal of every other one.

Runs on the driver when a query or a ``spark.read`` / ``df.write`` starts, once per path
option. A path is a plain local path or a ``file:`` URI; any other ``scheme:/...`` path
(``s3://bucket/out``, ``s3a://``, ``hdfs://``, ``gs://``, ``abfss://`` ...) is refused with an
error naming the scheme and the schemes served. It is never taken as a relative local path:
``Path("s3://acc/out")`` is ``s3:/acc/out`` under the working directory, which would write
every row to local disk while the user believes it went to the object store.
"""

from __future__ import annotations

import re

from sparklink.errors import ConfigError

SCHEME_FILE = "file"
SERVED_SCHEMES = (SCHEME_FILE,)
_SCHEME = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*):/")
_FILE_URI = re.compile(r"^file:(?://(?P<host>[^/]*))?(?P<path>/.*)$", re.IGNORECASE)
_LOCAL_HOSTS = ("", "localhost")


def local_path(option: str, path: str) -> str:
    """``path`` as a local file system path; ``file:///x``, ``file:/x`` and
    ``file://localhost/x`` give ``/x``. Raises ConfigError for any other scheme."""
    match = _SCHEME.match(path)
    if match is None:
        return path
    scheme = match.group("scheme").lower()
    if scheme != SCHEME_FILE:
        raise ConfigError(option, f"'{path}': scheme '{scheme}://' is not served by the file connectors "
                          "(object stores are not supported yet); a path is never taken as a local path when "
                          "it names another scheme", ", ".join(f"{s}://" for s in SERVED_SCHEMES) + " or a plain "
                          "local path")
    uri = _FILE_URI.match(path)
    if uri is None or (uri.group("host") or "").lower() not in _LOCAL_HOSTS:
        raise ConfigError(option, f"'{path}' is not a local file URI", "file:///absolute/path or a plain local path")
    return uri.group("path")
