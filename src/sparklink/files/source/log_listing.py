"""Reading a directory through Spark's file sink log (``<path>/_spark_metadata``), driver side,
once per trigger.

When the source's single path holds ``_spark_metadata`` (written by Spark's own file sink or
by the sparklink file sink), the source reads only the files that log names, as Spark's
readers do: a file being written, one of a failed attempt, or one left out by a compact
batch of the log is never read. The log's files are read as Spark reads them (the newest
compact file and the batches after it; see :mod:`sparklink.files.spark_log`).

Each file's arrival key is its ``modificationTime`` in the log: the sparklink sink records a
file's commit time there, and Spark's sink the time its task finished it, before the log
batch that names it is written. So a file named by a later log batch never sorts before a
file of an earlier one, and the source's position (one ``(time, path)`` pair) is all the
state it keeps; ``maxFilesPerTrigger``, ``maxBytesPerTrigger`` and ``Trigger.AvailableNow``
work as for a plain directory. Files the log drops (retention) are simply not listed again.

On S3 the same log is read through the storage seam (one ``ListObjectsV2`` of
``_spark_metadata/`` and one ``GetObject`` per log file of the view, per trigger) by
:class:`~sparklink.files.source.object_listing.ObjectStoreFileEnumerator`, with
:func:`logged_files`; the log's ``s3a://`` and ``s3://`` URIs name the same objects.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Iterator, Sequence

from sparklink.errors import DataError
from sparklink.files.source.listing import FileEnumerator, FileStatus
from sparklink.files.source.partitions import parse_partition
from sparklink.files.spark_log import METADATA_DIR, SinkFileStatus, SparkLog
from sparklink.storage.base import FileStorage
from sparklink.storage.local import LocalStorage

NS_PER_MS = 1_000_000


def has_spark_log(paths: Sequence[str]) -> bool:
    """True when the source reads one directory that holds ``_spark_metadata`` (Spark's rule)."""
    return len(paths) == 1 and os.path.isdir(os.path.join(paths[0], METADATA_DIR))


class SparkLogFileEnumerator(FileEnumerator):
    """Lists the files Spark's log names (driver side)."""

    def enumerate_files(self, paths: Sequence[str], glob: str | None) -> Iterator[FileStatus]:
        root = os.path.abspath(paths[0])
        storage = LocalStorage(root)
        for relative, entry in logged_files(storage, glob):
            yield FileStatus(arrival_ns=entry.modification_time * NS_PER_MS, path=storage.uri(relative),
                             size=entry.size, partition=parse_partition(relative.split("/")[:-1]))


def logged_files(storage: FileStorage, glob: str | None) -> Iterator[tuple[str, SinkFileStatus]]:
    """``(key under the output, log entry)`` of every file the log of the output on ``storage``
    names (local disk or S3), filtered by ``glob`` on the file name. A file the log names outside
    the output is refused: Spark's log holds absolute URIs, so the output was moved."""
    log = SparkLog(storage)
    for entry in log.view():
        if entry.is_dir:
            continue
        relative = log.relative(entry.path)
        if relative is None:
            raise DataError(f"{log.location} names {entry.path}, outside {storage.uri('')}: was the output moved? "
                            "Spark's log holds absolute paths")
        if glob is not None and not fnmatch.fnmatchcase(relative.rpartition("/")[2], glob):
            continue
        yield relative, entry
