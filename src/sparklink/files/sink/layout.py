"""Where every metadata file of a file sink output lives (driver side): one object, so the names
are written once.

    _sparklink/commits/<batchId>.json   the SDK commit log (and commits/job-<id>.json of df.write jobs)
    _sparklink/state/<batchId>.json     the committed state of each micro-batch
    _sparklink/owner.json               the streaming query that owns the output
    _sparklink/lease.json               the running query's lease
    _sparklink/sink.json                the sink's options and schema (for sparklink.files.finish)
    _sparklink/finish.json              a sparklink.files.finish that is deciding or applying
    _sparklink/manifest/compact.json    the live finished files of older batches
    _spark_metadata/<n>[.compact]       Spark's file sink log

Every name is on the output's :class:`~sparklink.storage.base.FileStorage` (local disk or S3).
"""

from __future__ import annotations

from dataclasses import dataclass

from sparklink.files.spark_log import METADATA_DIR as SPARK_METADATA_DIR
from sparklink.storage.base import FileStorage
from sparklink.storage.directory import StorageDirectory, StorageFile

META_DIR = "_sparklink"
OWNER = "owner.json"
LEASE = "lease.json"
SINK_RECORD = "sink.json"
FINISH_INTENT = "finish.json"
COMPACT_MANIFEST = "compact.json"


@dataclass(frozen=True)
class OutputLayout:
    """The metadata names of the output whose root is ``storage``'s."""

    storage: FileStorage

    @property
    def meta(self) -> StorageDirectory:
        """``_sparklink``: the owner claim, lease, sink record and finish intent."""
        return StorageDirectory(self.storage, META_DIR)

    @property
    def commits(self) -> StorageDirectory:
        return StorageDirectory(self.storage, f"{META_DIR}/commits")

    @property
    def states(self) -> StorageDirectory:
        return StorageDirectory(self.storage, f"{META_DIR}/state")

    @property
    def manifest(self) -> StorageDirectory:
        return StorageDirectory(self.storage, f"{META_DIR}/manifest")

    @property
    def owner(self) -> StorageFile:
        return StorageFile(self.meta, OWNER)

    @property
    def spark_metadata(self) -> StorageDirectory:
        """``_spark_metadata``: Spark's file sink log."""
        return StorageDirectory(self.storage, SPARK_METADATA_DIR)
