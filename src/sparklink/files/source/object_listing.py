"""Listing a key-listed store's prefixes (S3: ``s3://bucket/prefix``, ``s3a://...``) for the
file source, driver side. Used for every store whose location says ``KEY_LISTING``
(:mod:`sparklink.storage.location`): a flat key space listed in key order, resumable after a key.

Once per trigger for streams (once for ``spark.read``): every path is listed through the
storage seam (:meth:`~sparklink.storage.FileStorage.list`; on S3 ``ListObjectsV2``, 1000 keys
per request, in key order; the next page is requested while this module goes through the
current one). Planning itself starts when the listing is whole: it orders the files by
arrival time, which any page may change. The rules of the directory walk apply to the key's
segments: a key with a hidden segment (leading ``.`` or ``_``) or a temporary suffix is
skipped, so an output of the sparklink file sink shows only its committed part files (its
``_sparklink/`` metadata, hidden in-progress names and tail objects are never listed, and a
multipart upload is not an object before its commit); directory markers (keys ending in ``/``)
are skipped; ``pathGlobFilter`` applies to the last segment; ``key=value`` segments are hive
partition values. A path that names one object (not a prefix) lists that object.

A file's arrival key is its ``LastModified`` (milliseconds). Unlike a local file's ctime it is
not the time the object became visible, which is why S3 offsets carry the files read within
``maxVisibilityDelay`` (see :mod:`~sparklink.files.source.position`).

A prefix holding ``_spark_metadata`` (Spark's file sink log, written by Spark's file sink
through S3A or by the sparklink file sink) is read through that log, as Spark's readers do:
Spark's sink writes its data files under their final names before its log names them, so only
the log tells committed files apart, and a visible object no log batch names (a failed
attempt's, or one put there by hand) is never read. As on local disk this needs the source's
single path to be the output (several paths with a log among them are refused). Once a path
is seen with its log, every later trigger reads the log instead of listing the prefix
(:func:`~sparklink.files.source.log_listing.logged_files`: one ``ListObjectsV2`` of
``_spark_metadata/`` and one ``GetObject`` per log file of the view); each file's arrival key
is its commit time in the log, monotonic in commit order.
"""

from __future__ import annotations

import fnmatch
import time
from collections.abc import Iterator, Sequence

from sparklink.errors import DataError
from sparklink.files.source.listing import FileEnumerator, FileStatus, is_hidden
from sparklink.files.source.log_listing import logged_files
from sparklink.files.source.partitions import parse_partition
from sparklink.files.source.position import FilePosition
from sparklink.files.spark_log import METADATA_DIR
from sparklink.storage.base import FileStorage
from sparklink.storage.file_input import reading_storage
from sparklink.storage.location import Location, parse_location
from sparklink.storage.s3_config import S3Config

NS_PER_MS = 1_000_000


class ObjectStoreFileEnumerator(FileEnumerator):
    """A listing in key order under every path (ListObjectsV2 on S3; driver side). ``s3``: the
    paths' S3 settings (:func:`~sparklink.storage.s3_config.settings_for`, None for a store
    without such settings).

    With ``incremental_listing_settle_ns`` (option ``useIncrementalListing``) a stream's listing
    starts after a *settled key* per path (``StartAfter``): the greatest key such that every
    readable object at or below it has been read (the trigger's start position covers it) and
    was first listed at least that long ago (``maxVisibilityDelay`` plus the
    clock margin). Assumption, as for Auto Loader's incremental listing: objects appear in
    lexical key order, so no object appears later than ``maxVisibilityDelay`` after an object
    with a greater key was listed. The settled keys live in driver memory only: a restarted
    query lists each path whole once, and a call for an older start position (a replay) lists
    whole without moving them.
    """

    def __init__(self, s3: S3Config | None, *, incremental_listing_settle_ns: int | None = None):
        self.s3 = s3
        self.settle_ns = incremental_listing_settle_ns
        self._settled_key: dict[str, str] = {}             # path -> its settled key
        self._first_listed: dict[str, dict[str, int]] = {}  # path -> readable key above it -> first listed (ns)
        self._latest_read: FilePosition | None = None      # the start position the settled keys moved with
        self._logged: set[str] = set()                      # paths holding a _spark_metadata log: read through it

    def enumerate_files(self, paths: Sequence[str], glob: str | None) -> Iterator[FileStatus]:
        for root in paths:
            yield from self._list_prefix(parse_location("path", root), glob, single=len(paths) == 1)

    def enumerate_after(self, paths: Sequence[str], glob: str | None, *, after: tuple[int, str],
                        cutoff_ns: int, read: FilePosition | None = None) -> Iterator[FileStatus]:
        """``read``: the trigger's start position (its watermark and ``recent`` objects), which
        lets the settled keys move; without it the listing is whole."""
        if (self.settle_ns is None or read is None or not _covers_all_of(read, self._latest_read)
                or any(root in self._logged for root in paths)):
            return self.enumerate_files(paths, glob)  # a replay of an older batch: the whole listing
        self._latest_read = read
        return self._enumerate_incrementally(paths, glob, read)

    def _enumerate_incrementally(self, paths: Sequence[str], glob: str | None,
                                 read: FilePosition) -> Iterator[FileStatus]:
        """One listing per path after its settled key, which then moves up over the readable
        keys (in key order) that are read and settled (never over a path naming one object)."""
        assert self.settle_ns is not None
        for root in paths:
            listed_at = time.time_ns()
            settled = self._settled_key.get(root)
            first_listed = self._first_listed.setdefault(root, {})
            listed = list(self._listed(parse_location("path", root), glob, start_after=settled, single=len(paths) == 1))
            for key, _ in listed:
                first_listed.setdefault(key, listed_at)
            for key, status in listed:  # ascending keys (ListObjectsV2's order)
                if not key or not read.covers(status.sort_key) or listed_at - first_listed[key] < self.settle_ns:
                    break
                settled = key
            if settled is not None and settled != self._settled_key.get(root):
                self._settled_key[root] = settled
                self._first_listed[root] = {key: at for key, at in first_listed.items() if key > settled}
            for _, status in listed:
                yield status

    def _list_prefix(self, location: Location, glob: str | None, *, single: bool) -> Iterator[FileStatus]:
        for _, status in self._listed(location, glob, start_after=None, single=single):
            yield status

    def _listed(self, location: Location, glob: str | None, *, start_after: str | None,
                single: bool) -> Iterator[tuple[str, FileStatus]]:
        """``(key, file)`` of every readable object under ``location`` (after ``start_after``),
        or of every file its ``_spark_metadata`` log names when it holds one."""
        storage = reading_storage(location, self.s3)
        if location.uri() in self._logged:
            yield from self._through_log(storage, glob)
            return
        found: list[tuple[str, FileStatus]] = []
        listed = False
        for info in storage.list(start_after=start_after, read_ahead=True):  # pages overlap the checks below
            listed = True
            segments = info.key.split("/")
            if segments[0] == METADATA_DIR:
                if not single:
                    raise DataError(f"{storage.uri(METADATA_DIR)} exists: {location.uri()} is the output of a file "
                                    "sink whose committed files only its log names, and a source reads through that "
                                    "log only when it is its single path (as Spark's readers do)")
                self._logged.add(location.uri())
                yield from self._through_log(storage, glob)
                return
            name = segments[-1]
            if not name or any(is_hidden(segment) for segment in segments):
                continue  # a directory marker, or hidden / temporary
            if glob is not None and not fnmatch.fnmatchcase(name, glob):
                continue
            found.append((info.key, FileStatus(arrival_ns=round(info.modified_at * 1000) * NS_PER_MS,
                                               path=storage.uri(info.key), size=info.size,
                                               partition=parse_partition(segments[:-1]))))
        yield from found
        up = location.parent()
        if not listed and up is not None and start_after is None:
            parent, name = up
            for status in self._single_object(parent, name, glob):
                yield "", status

    @staticmethod
    def _through_log(storage: FileStorage, glob: str | None) -> Iterator[tuple[str, FileStatus]]:
        """The files the output's ``_spark_metadata`` log names (no listing of the data keys)."""
        for relative, entry in logged_files(storage, glob):
            yield relative, FileStatus(arrival_ns=entry.modification_time * NS_PER_MS, path=storage.uri(relative),
                                       size=entry.size, partition=parse_partition(relative.split("/")[:-1]))

    def _single_object(self, parent: Location, name: str, glob: str | None) -> Iterator[FileStatus]:
        """The path (``name`` under ``parent``) names one object, or nothing (an empty prefix
        lists no file: S3 has no directories, so a prefix a stream waits on may not exist yet)."""
        storage = reading_storage(parent, self.s3)
        info = storage.info(name)
        if info is None or (glob is not None and not fnmatch.fnmatchcase(name, glob)):
            return
        yield FileStatus(arrival_ns=round(info.modified_at * 1000) * NS_PER_MS, path=storage.uri(name), size=info.size)


def _covers_all_of(position: FilePosition, earlier: FilePosition | None) -> bool:
    """Whether ``position`` covers every file ``earlier`` covers (the settled keys may be used)."""
    return earlier is None or (earlier.sort_key <= position.sort_key
                               and all(position.covers(key) for key in earlier.recent))
