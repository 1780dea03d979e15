"""The file sink's committer (Flink's FileCommitter), run on the driver inside Spark's commit.

For micro-batch N it computes the sink's committed state N once (see
:mod:`sparklink.files.sink.state`), persists it, then applies it: rename pending files to
their finished names, cut carried in-progress files to their recorded length, run planned
compactions, delete superseded hidden files, and last record the finished files in Spark's
log (``_spark_metadata``, see :mod:`sparklink.files.spark_log`). Every step is idempotent: after a crash the SDK
rolls the commit forward and this committer replays the same state file.

Every file operation goes through the output's part-file seam
(:mod:`sparklink.storage.recoverable`: a rename on local disk, ``CompleteMultipartUpload`` on
S3), the same steps on every store.

Fault points: ``filesink.before_state``, ``filesink.after_state``, ``filesink.after_first_rename``,
``filesink.after_renames``, ``filesink.after_spark_log`` (and ``compaction.*`` inside compactions).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from sparklink.errors import CommitError, DataError
from sparklink.faults import fault_point
from sparklink.files.sink.compaction import FileCompactStrategy, run_compaction
from sparklink.files.sink.manifest import finished_by
from sparklink.files.sink.part_files import PartFile
from sparklink.files.sink.rolling_policies import RollingPolicy
from sparklink.files.sink.state import SinkState, StateStore, next_state
from sparklink.files.spark_log import SparkLog
from sparklink.formats.config import FormatConfig
from sparklink.sink.committer import CommitRequest, Committer
from sparklink.storage.recoverable import RecoverableWriter


class FileCommitter(Committer):
    """Driver side, one per commit."""

    def __init__(self, *, part_files: RecoverableWriter, store: StateStore, format_config: FormatConfig,
                 rolling_policy: RollingPolicy, compaction: FileCompactStrategy | None,
                 plan_name: Callable[[str, int, int], tuple[str, str]], csv_header: bytes,
                 spark_log: SparkLog | None = None, existing_files: Callable[[], set[str]] | None = None):
        self.part_files = part_files
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
        for part in parts:
            self.part_files.commit(part)
        self.part_files.clean_after_commit(parts, [])
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
        """Make state N true in the output (idempotent): held files readable at their hidden
        names, pending files published, carried files cut back to their committed length, the
        planned compactions run, superseded copies deleted; then Spark's log."""
        for part in state.held:
            self.part_files.commit_hidden(part)
        for index, part in enumerate(state.finish):
            self.part_files.commit(part)
            if index == 0:
                fault_point("filesink.after_first_rename", batch_id=state.batch_id)
        for part in state.in_progress:
            self.part_files.cut_back(part)
        for plan in state.compactions:
            run_compaction(self.format, self.part_files, plan.inputs, plan.tmp, plan.final, header=self.csv_header,
                           batch_id=state.batch_id)
        for obsolete in state.obsolete:
            self.part_files.storage.delete(obsolete)
        completed = state.finish + state.held + [part for plan in state.compactions for part in plan.inputs]
        self.part_files.clean_after_commit(completed, state.in_progress)
        fault_point("filesink.after_renames", batch_id=state.batch_id)
        self.record_in_spark_log(finished_by(state), committed_at=state.committed_at, parts=state.finish)
        fault_point("filesink.after_spark_log", batch_id=state.batch_id)

    def record_in_spark_log(self, relatives: list[str], *, committed_at: float, parts: Sequence[PartFile] = ()) -> None:
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
