"""Listing S3 prefixes (``s3://bucket/prefix``, ``s3a://...``) for the file source, driver side.

Once per trigger for streams (once for ``spark.read``): every path is listed with
``ListObjectsV2`` through the storage seam (:meth:`~sparklink.files.storage.FileStorage.list`,
1000 keys per request, in key order). The rules of the directory walk apply to the key's
segments: a key with a hidden segment (leading ``.`` or ``_``) or a temporary suffix is
skipped, so an output of the sparklink file sink shows only its committed part files (its
``_sparklink/`` metadata, hidden in-progress names and tail objects are never listed, and a
multipart upload is not an object before its commit); directory markers (keys ending in ``/``)
are skipped; ``pathGlobFilter`` applies to the last segment; ``key=value`` segments are hive
partition values. A path that names one object (not a prefix) lists that object.

A file's arrival key is its ``LastModified`` (milliseconds). Unlike a local file's ctime it is
not the time the object became visible, which is why S3 offsets carry the files read within
``maxVisibilityDelay`` (see :mod:`~sparklink.files.source.position`).

A prefix holding ``_spark_metadata`` (Spark's file sink log) is refused: Spark's sink writes
its data files under their final names before its log names them, so only its log tells
committed files apart, and the log reader is not served on S3 yet.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterator, Sequence

from sparklink.errors import DataError
from sparklink.files.sink.spark_log import METADATA_DIR
from sparklink.files.source.file_input import object_storage
from sparklink.files.source.listing import FileEnumerator, FileStatus, is_hidden
from sparklink.files.source.partitions import parse_partition
from sparklink.files.storage.location import S3Location, parse_location
from sparklink.files.storage.s3_config import S3Config

NS_PER_MS = 1_000_000


class ObjectStoreFileEnumerator(FileEnumerator):
    """ListObjectsV2 under every path (driver side)."""

    def __init__(self, s3: S3Config):
        self.s3 = s3

    def enumerate_files(self, paths: Sequence[str], glob: str | None) -> Iterator[FileStatus]:
        for root in paths:
            location = parse_location("path", root)
            assert isinstance(location, S3Location)  # the config refuses a mix of local and S3 paths
            yield from self._list_prefix(location, glob)

    def _list_prefix(self, location: S3Location, glob: str | None) -> Iterator[FileStatus]:
        storage = object_storage(location, self.s3)
        listed = False
        for info in storage.list():
            listed = True
            segments = info.key.split("/")
            if segments[0] == METADATA_DIR:
                raise DataError(f"{storage.uri(METADATA_DIR)} exists: {location.uri()} is the output of Spark's file "
                                "sink, whose committed files only its log names; reading that log on S3 is not "
                                "supported yet (read the directory with Spark's own reader, or write it with the "
                                "sparklink file sink, whose uncommitted files are never visible)")
            name = segments[-1]
            if not name or any(is_hidden(segment) for segment in segments):
                continue  # a directory marker, or hidden / temporary
            if glob is not None and not fnmatch.fnmatchcase(name, glob):
                continue
            yield FileStatus(arrival_ns=round(info.modified_at * 1000) * NS_PER_MS, path=storage.uri(info.key),
                             size=info.size, partition=parse_partition(segments[:-1]))
        if not listed and location.prefix:
            yield from self._single_object(location, glob)

    def _single_object(self, location: S3Location, glob: str | None) -> Iterator[FileStatus]:
        """The path names one object, or nothing (an empty prefix lists no file: S3 has no
        directories, so a prefix a stream waits on may not exist yet)."""
        parent, _, name = location.prefix.rpartition("/")
        storage = object_storage(S3Location(scheme=location.scheme, bucket=location.bucket, prefix=parent), self.s3)
        info = storage.info(name)
        if info is None or (glob is not None and not fnmatch.fnmatchcase(name, glob)):
            return
        yield FileStatus(arrival_ns=round(info.modified_at * 1000) * NS_PER_MS, path=storage.uri(name), size=info.size)
