"""A transactional directory sink (an SDK example): Parquet files, visible only once committed.

Layout under ``path``::

    _sparklink/commits/<batchId>.json        commit log (see sparklink.sink.commit_log)
    _sparklink/owner.json                    the streaming query that owns the directory
    _staging/b<batchId>/<partition>-<attempt>-<uuid>.parquet   staged (streaming), invisible to readers
    _staging/j<jobId>/<partition>-<attempt>-<uuid>.parquet     staged (df.write)
    part-b<batchId>-p<partition>.parquet     committed (streaming)
    part-j<jobId>-p<partition>.parquet       committed (df.write)

Each task stages one file; its committable names the staged file and the final name. Commit
renames (idempotent: a missing staged file beside an existing final file is already done).
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Mapping
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql.types import StructType

from sparklink.errors import CommitError
from sparklink.options import NON_EMPTY, Option, Options, OptionTable
from sparklink.sink import CommitRequest, Committable, Committer, Sink, SinkWriter, WriterContext
from sparklink.sink.changelog import refuse_upsert
from sparklink.storage.directory import StorageDirectory, StorageFile
from sparklink.storage.local import LocalStorage


class DirectoryOptions(OptionTable):
    """The example's one option; any other key (but those Spark adds) is refused."""

    path = Option("path", NON_EMPTY, required=True, doc="the output directory")


PATH = DirectoryOptions.path
STAGING_DIR = "_staging"
META_DIR = "_sparklink"


def staging_name(batch_id: int | None, job_id: str) -> str:
    """Staging folder of one micro-batch (all its attempts) or of one batch job."""
    return f"b{batch_id:08d}" if batch_id is not None else f"j{job_id}"


class DirectoryWriter(SinkWriter):
    """Executor side: streams one task's Arrow batches into one staged Parquet file."""

    def __init__(self, root: Path, context: WriterContext):
        self.root = root
        self.context = context
        self.staging = root / STAGING_DIR / staging_name(context.batch_id, context.job_id)
        self.staged_path = self.staging / f"{context.partition_id:05d}-{context.attempt_number}-{uuid.uuid4().hex}.parquet"
        self._writer: pq.ParquetWriter | None = None
        self.rows = 0

    def write_batch(self, batch: pa.RecordBatch) -> None:
        if self._writer is None:
            self.staging.mkdir(parents=True, exist_ok=True)
            self._writer = pq.ParquetWriter(self.staged_path, batch.schema)
        self._writer.write_batch(batch)
        self.rows += batch.num_rows

    def flush(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def prepare_commit(self) -> list[Committable]:
        if self.rows == 0:
            return []
        if self.context.batch_id is not None:
            final = f"part-b{self.context.batch_id:08d}-p{self.context.partition_id:05d}.parquet"
        else:
            final = f"part-j{self.context.job_id[:16]}-p{self.context.partition_id:05d}.parquet"
        return [{"staged": str(self.staged_path.relative_to(self.root)), "final": final, "rows": self.rows}]

    def abort(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        self.staged_path.unlink(missing_ok=True)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()


class DirectoryCommitter(Committer):
    """Driver side: renames staged files to their final names."""

    def __init__(self, root: Path):
        self.root = root

    def commit(self, requests: list[CommitRequest]) -> None:
        for request in requests:
            staged = self.root / request.committable["staged"]
            final = self.root / request.committable["final"]
            if staged.exists():
                os.replace(staged, final)
            elif final.exists():
                request.signal_already_committed()
            else:
                request.signal_failed_with_unknown_reason(
                    CommitError(f"staged file {staged} is gone and {final} does not exist"))


class DirectorySink(Sink):
    """The sink: validates options on the driver, makes writers (executors) and the committer."""

    def __init__(self, options: Mapping[str, str] | None, schema: StructType):
        super().__init__(options, schema)
        refuse_upsert(Options(options), "sparklink.directory")  # files only append
        self.root = Path(PATH.value(DirectoryOptions.options(options))).absolute()

    @classmethod
    def validate(cls, options: Mapping[str, str] | None, schema: StructType) -> None:
        refuse_upsert(Options(options), "sparklink.directory")
        DirectoryOptions.options(options)

    def create_writer(self, context: WriterContext) -> DirectoryWriter:
        return DirectoryWriter(self.root, context)

    def create_committer(self) -> DirectoryCommitter:
        return DirectoryCommitter(self.root)

    def commit_log_dir(self) -> StorageDirectory:
        return StorageDirectory(LocalStorage(self.root), f"{META_DIR}/commits")

    def owner_lock_path(self) -> StorageFile:
        return StorageFile(StorageDirectory(LocalStorage(self.root), META_DIR), "owner.json")

    def discard(self, committables: list[Committable]) -> None:
        for committable in committables:
            (self.root / committable["staged"]).unlink(missing_ok=True)

    def post_commit(self, batch_id: int | None, committables: list[Committable]) -> None:
        staging = self.root / STAGING_DIR
        if batch_id is None:
            for job_dir in {Path(c["staged"]).parent for c in committables}:
                shutil.rmtree(self.root / job_dir, ignore_errors=True)
            return
        # one owner, one commit at a time: what is still staged for this batch or an earlier one
        # belongs to failed or duplicate attempts (later batches are left alone: a roll-forward
        # of an old entry runs while the current batch's files wait in staging)
        if not staging.is_dir():
            return
        for folder in staging.iterdir():
            if folder.name.startswith("b") and folder.name[1:].isdigit() and int(folder.name[1:]) <= batch_id:
                shutil.rmtree(folder, ignore_errors=True)
