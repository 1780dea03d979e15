"""Local paths for the code that reads and writes local files only (driver side, at start).

:func:`sparklink.storage.parse_location` knows every served location: plain local paths,
``file:`` URIs and ``s3://`` / ``s3a://``. The file sink writes S3 outputs, the file source
reads S3 prefixes and the ``inspect`` / ``verify`` commands read them (they parse their paths
themselves); ``sparklink.files.finish`` still does its I/O on local files: :func:`local_path`
refuses an S3 path for it with an error naming the scheme, as it refuses every scheme that is
not served at all. A path that names a scheme is never taken as a relative local path
(``s3:/acc/out`` under the working directory).
"""

from __future__ import annotations

from sparklink.errors import ConfigError
from sparklink.storage.location import S3_SCHEMES, SCHEME_FILE, LocalLocation, parse_location, scheme_of

LOCAL_TEXT = f"{SCHEME_FILE}:// or a plain local path"


def local_path(option: str, path: str) -> str:
    """``path`` as a local file system path; ``file:///x``, ``file:/x`` and
    ``file://localhost/x`` give ``/x``. Raises ConfigError for any other scheme."""
    scheme = scheme_of(path)
    if scheme in S3_SCHEMES:
        raise ConfigError(option, f"'{path}': scheme '{scheme}://' is not served by the file connectors yet "
                          "(the file sink writes S3 outputs, the file source reads them and sparklink inspect / "
                          "verify check them, but sparklink.files.finish reads and writes local files only; finish is "
                          "not served on S3, where a carried or held file becomes visible when a later micro-batch "
                          "rolls or compacts it); a path is never taken as a local path when it names a scheme", LOCAL_TEXT)
    location = parse_location(option, path)
    assert isinstance(location, LocalLocation)  # every other scheme is refused by parse_location
    return location.path
