"""The file sink's committer (Flink's FileCommitter), run on the driver inside Spark's commit.

For micro-batch N it computes the sink's committed state N once (see
:mod:`sparklink.files.sink.state`), persists it, then applies it: rename pending files to
their finished names, cut carried in-progress files to their recorded length, run planned
compactions, delete superseded hidden files, and last record the finished files in Spark's
log (``_spark_metadata``, see :mod:`sparklink.files.sink.spark_log`). Every step is idempotent: after a crash the SDK
rolls the commit forward and this committer replays the same state file.

On S3 (``storage`` given) finishing a pending file is ``CompleteMultipartUpload`` of its upload
(:func:`~sparklink.files.sink.s3_parts.complete_part`, idempotent), carried files need no
cutting back (their committed parts and tail objects never change), superseded tail objects
are deleted, and compactions run with :func:`~sparklink.files.sink.compaction.run_compaction_on_s3`;
and the finished files are recorded in Spark's log as on local disk (through the storage seam).

Fault points: ``filesink.before_state``, ``filesink.after_state``, ``filesink.after_first_rename``,
``filesink.after_renames``, ``filesink.after_spark_log`` (and ``compaction.*`` inside compactions).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

from sparklink.errors import CommitError, DataError
from sparklink.faults import fault_point
from sparklink.files.sink.compaction import FileCompactStrategy, run_compaction, run_compaction_on_s3
from sparklink.files.sink.formats import FormatConfig
from sparklink.files.sink.manifest import finished_by
from sparklink.files.sink.part_files import PartFile, fsync_dir, truncate_to
from sparklink.files.sink.rolling_policies import RollingPolicy
from sparklink.files.sink.s3_parts import complete_part, tails_after_commit
from sparklink.files.sink.s3_parts import finish_part as finish_s3_part
from sparklink.files.sink.spark_log import SparkLog
from sparklink.files.sink.state import SinkState, StateStore, next_state
from sparklink.storage.multipart_file import DEFAULT_PART_SIZE
from sparklink.storage.s3 import S3Storage
from sparklink.sink.committer import CommitRequest, Committer


def finish_part(root: Path, part: PartFile) -> bool:
    """Rename a pending file to its finished name; True if this call did it. Idempotent."""
    source, target = root / part.path, root / part.final
    if source.exists():
        if target.exists():
            raise CommitError(f"cannot finish {source}: the finished file {target} already exists and is never "
                              "overwritten")
        truncate_to(source, part.length)
        os.rename(source, target)
        return True
    if target.exists():
        return False
    raise CommitError(f"pending file {source} is gone and {target} does not exist: the data of "
                      f"{part.rows} rows is lost (was the output directory changed by hand?)")


class FileCommitter(Committer):
    """Driver side, one per commit."""

    def __init__(self, *, root: Path, store: StateStore, format_config: FormatConfig, rolling_policy: RollingPolicy,
                 compaction: FileCompactStrategy | None, plan_name: Callable[[str, int, int], tuple[str, str]],
                 csv_header: bytes, spark_log: SparkLog | None = None,
                 existing_files: Callable[[], set[str]] | None = None, storage: S3Storage | None = None,
                 s3_part_size: int = DEFAULT_PART_SIZE):
        self.root = root
        self.storage = storage
        self.s3_part_size = s3_part_size
        self.store = store
        self.format = format_config
        self.policy = rolling_policy
        self.compaction = compaction
        self.plan_name = plan_name
        self.csv_header = csv_header
        self.spark_log = spark_log
        self.existing_files = existing_files

    def commit(self, requests: list[CommitRequest]) -> None:
        if not requests:
            return
        batch_id = requests[0].batch_id
        try:
            parts = [PartFile.from_json(r.committable) for r in requests]
            if batch_id is None:
                self._finish_all(parts)
            else:
                self.apply(self.state_for(batch_id, parts))
        except (OSError, CommitError, DataError) as exc:
            for request in requests:
                request.signal_failed_with_unknown_reason(exc)

    def _finish_all(self, parts: list[PartFile]) -> None:
        """A ``df.write`` job: every file rolled at the end of its task."""
        if self.storage is not None:
            for part in parts:
                finish_s3_part(self.storage, part, part_size=self.s3_part_size)
            self.record_in_spark_log([p.final for p in parts], committed_at=time.time(), parts=parts)
            return
        for part in parts:
            finish_part(self.root, part)
        for directory in {(self.root / p.final).parent for p in parts}:
            fsync_dir(directory)
        self.record_in_spark_log([p.final for p in parts], committed_at=time.time(), parts=parts)

    def state_for(self, batch_id: int, parts: list[PartFile]) -> SinkState:
        """State N: read it if a crashed commit already wrote it, else compute and persist it."""
        state = self.store.get(batch_id)
        if state is not None:
            return state
        fault_point("filesink.before_state", batch_id=batch_id)
        previous = self.store.latest_before(batch_id)
        now = max(time.time(), previous.committed_at + 0.001)  # commit times increase with batches
        state = next_state(previous, batch_id, parts, now=now, rolling_policy=self.policy,
                           compaction=self.compaction,
                           plan_name=lambda bucket, index: self.plan_name(bucket, batch_id, index))
        self.store.create(state)
        fault_point("filesink.after_state", batch_id=batch_id)
        return state

    def apply(self, state: SinkState) -> None:
        """Make state N true on disk (idempotent)."""
        if self.storage is not None:
            self._apply_on_s3(state)
            return
        directories: set[Path] = set()
        for index, part in enumerate(state.finish):
            finish_part(self.root, part)
            directories.add((self.root / part.final).parent)
            if index == 0:
                fault_point("filesink.after_first_rename", batch_id=state.batch_id)
        for part in state.in_progress:
            path = self.root / part.path
            if not path.exists():
                raise CommitError(f"in-progress file {path} recorded by the commit of batch {state.batch_id} is gone")
            truncate_to(path, part.length)
        for plan in state.compactions:
            run_compaction(self.format, self.root, plan.inputs, plan.tmp, plan.final, header=self.csv_header,
                           batch_id=state.batch_id)
        for obsolete in state.obsolete:
            (self.root / obsolete).unlink(missing_ok=True)
        for directory in directories:
            fsync_dir(directory)
        fault_point("filesink.after_renames", batch_id=state.batch_id)
        self.record_in_spark_log(finished_by(state), committed_at=state.committed_at, parts=state.finish)
        fault_point("filesink.after_spark_log", batch_id=state.batch_id)

    def _apply_on_s3(self, state: SinkState) -> None:
        """State N on S3: complete the held files' uploads at their hidden names, finish the
        pending files (complete; or, staged hidden, complete, copy and delete), run the planned
        compactions, then delete the tail objects the state no longer needs (idempotent)."""
        if state.obsolete:
            raise CommitError(f"the state of batch {state.batch_id} removes copied carried files, which the file "
                              f"sink never makes on S3 ({self.storage.describe()})")
        for part in state.held:
            complete_part(self.storage, part)
        for index, part in enumerate(state.finish):
            finish_s3_part(self.storage, part, part_size=self.s3_part_size)
            if index == 0:
                fault_point("filesink.after_first_rename", batch_id=state.batch_id)
        for plan in state.compactions:
            run_compaction_on_s3(self.format, self.storage, plan.inputs, plan.final, header=self.csv_header,
                                 batch_id=state.batch_id, part_size=self.s3_part_size)
        completed = state.finish + state.held + [part for plan in state.compactions for part in plan.inputs]
        for key in sorted(tails_after_commit(completed, state.in_progress)):
            self.storage.delete(key)
        fault_point("filesink.after_renames", batch_id=state.batch_id)
        self.record_in_spark_log(finished_by(state), committed_at=state.committed_at, parts=state.finish)
        fault_point("filesink.after_spark_log", batch_id=state.batch_id)

    def record_in_spark_log(self, relatives: list[str], *, committed_at: float, parts: list[PartFile] = ()) -> None:
        """Append the finished files to Spark's log, once (after they are all in place). The
        sizes of ``parts`` are their committed lengths; other files (compacted) are looked up."""
        if self.spark_log is None or not relatives:
            return
        sizes = {part.final: part.length for part in parts}
        self.spark_log.commit([self.spark_log.status(rel, committed_at=committed_at, size=sizes.get(rel))
                               for rel in relatives], now=time.time(), existing=self._existing_statuses)

    def _existing_statuses(self):
        """Files the output had before its Spark log started (they go into its first batch)."""
        for relative in sorted(self.existing_files() if self.existing_files else ()):
            info = self.spark_log.storage.info(relative)
            if info is not None:
                yield self.spark_log.status(relative, committed_at=info.modified_at, size=info.size)
