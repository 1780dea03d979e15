"""The file sink's recovery (driver side): what a restart of the query runs, and the parts of
``sparklink.files.finish`` it shares.

* :func:`restore_output`, once per query run: the metadata checked against itself
  (:mod:`sparklink.files.sink.consistency`), what can be rebuilt exactly rebuilt, the start
  refused otherwise; an unfinished commit rolled forward; an interrupted finish resumed; what
  task attempts stored for the last commit's finished files swept.
* the sink's record (:func:`record_sink`), the finishing state (:func:`finishing_state`) and
  resuming a finish (:func:`resume_finish`).

:mod:`sparklink.files.sink.connector` runs :func:`record_sink` when the sink is built and
:func:`restore_output` in its restore; :mod:`sparklink.files.sink.finish` decides a finish,
writes its intent and calls :func:`resume_finish`. This module imports neither of them (the
connector is the :class:`RecoveringSink` here), so they do not import each other.

Persisted formats: ``_sparklink/sink.json`` (``v`` 1: the sink's options without ``path``,
``checkpointLocation``, ``queryName`` and the S3 credentials, and its schema) and
``_sparklink/finish.json`` (``v`` 1: the finishing state), both written through the output's
storage (:mod:`sparklink.storage`), local disk or S3.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any, Protocol, cast

from sparklink.errors import CommitError, MetadataError
from sparklink.faults import fault_point
from sparklink.files.sink.consistency import (
    REBUILD_STATE,
    REBUILT_KEY,
    REWRITE_ENTRY_FINISHED,
    REWRITE_ENTRY_FROM_STATE,
    MetadataScan,
)
from sparklink.files.sink.layout import FINISH_INTENT, SINK_RECORD  # noqa: F401 - SINK_RECORD re-exported
from sparklink.files.sink.options import FileSinkOptions
from sparklink.files.sink.part_files import COMPACTION_TAG, PENDING, PartFile, finished_name, in_progress_name, relative
from sparklink.files.sink.state import CompactionPlan, SinkState, StateStore, empty_state, next_state
from sparklink.options import SPARK_PROVIDED_OPTIONS
from sparklink.sink.commit_log import STATE_FINISHED, CommitLog, CommitLogEntry, json_bytes
from sparklink.sink.protocol import roll_forward
from sparklink.sink.sink import Sink
from sparklink.storage.base import FileStorage
from sparklink.storage.directory import StorageDirectory
from sparklink.storage.recoverable import RecoverableWriter
from sparklink.storage.s3_config import SECRET_OPTIONS, S3Options

LOG = logging.getLogger(__name__)


class RecoveringSink(Protocol):
    """What recovery asks of the file sink (driver side; its connector is one)."""

    config: Any

    @property
    def seals_carried_in_place(self) -> bool: ...

    def storage(self) -> FileStorage: ...

    def part_files(self) -> RecoverableWriter: ...

    def commit_log_dir(self) -> StorageDirectory: ...

    def meta_directory(self) -> StorageDirectory: ...

    def state_store(self) -> StateStore: ...

    def create_committer(self) -> Any: ...

    def plan_name(self, bucket: str, batch_id: int, index: int) -> tuple[str, str]: ...
RECORD_VERSION = 1
# no secret on disk, and no half of a key pair: a finish takes credentials from its options or the environment
CREDENTIAL_OPTIONS = tuple(o.lower() for o in SECRET_OPTIONS + (S3Options.access_key_id.key,))
_NOT_RECORDED = (FileSinkOptions.path.key.lower(), *(k.lower() for k in SPARK_PROVIDED_OPTIONS)) + CREDENTIAL_OPTIONS


def record_sink(meta: StorageDirectory, options: dict[str, str], schema_json: str) -> None:
    """Driver side, when the sink is built: keep its options and schema for ``sparklink.files.finish`` in
    ``meta`` (the output's ``_sparklink`` directory, on any storage; one read, and a write only
    when they changed)."""
    record = {"v": RECORD_VERSION, "schema": json.loads(schema_json),
              "options": {k: v for k, v in sorted(options.items()) if k.lower() not in _NOT_RECORDED}}
    stored = meta.read(SINK_RECORD)
    if stored is not None:
        try:
            if json.loads(stored.data) == record:
                return
        except json.JSONDecodeError:
            pass
    meta.put(SINK_RECORD, json_bytes(record))


def read_record(meta: StorageDirectory) -> dict | None:
    stored = meta.read(SINK_RECORD)
    return json.loads(stored.data) if stored is not None else None


def recorded_retention(meta: StorageDirectory) -> float | None:
    """The ``fileRetention`` the sink was last started with (None: none, or not recorded)."""
    from sparklink.files.sink.manifest import file_retention
    from sparklink.options import Options

    try:
        record = read_record(meta)
    except json.JSONDecodeError:
        return None
    return file_retention(Options(record.get("options", {}))) if record is not None else None


def finishing_state(sink: RecoveringSink, last: SinkState, *, now: float) -> SinkState | None:
    """State ``F``: every held and carried file of ``last`` committed (None: nothing to do).
    Without compaction a carried file is copied (local disk), or, where the sink's part files
    are sealed in place (S3: the upload completed with its recorded parts), finished as it is."""
    if not last.held and not last.in_progress:
        return None
    by_bucket: dict[str, list[PartFile]] = {}
    for part in last.held + last.in_progress:
        part = PartFile.from_json(part.to_json())
        part.state = PENDING
        by_bucket.setdefault(part.bucket, []).append(part)
    state = SinkState(batch_id=last.batch_id, committed_at=max(now, last.committed_at + 0.001))
    carried = {part.path for part in last.in_progress}
    for bucket in sorted(by_bucket):
        files = by_bucket[bucket]
        if len(files) == 1 and files[0].path not in carried:
            state.finish.extend(files)  # a held file: no task writes to it, it is renamed
        elif sink.config.compaction is None and sink.seals_carried_in_place:
            state.finish.extend(files)  # S3: each upload completed with the parts the commit recorded
        elif sink.config.compaction is not None:
            _plan(sink, state, bucket, files, batch_id=last.batch_id)
        else:  # carried files are copied, each to a file of its own
            for part in files:
                _plan(sink, state, bucket, [part], batch_id=last.batch_id)
    return state


def _plan(sink: RecoveringSink, state: SinkState, bucket: str, inputs: list[PartFile], *, batch_id: int) -> None:
    """Compact (or copy) ``inputs`` into one new finished file of ``bucket``."""
    output = sink.config.output
    final = finished_name(output.part_prefix, f"f{batch_id:08d}", len(state.compactions),
                          output.suffix_for(sink.config.format.extension))
    state.compactions.append(CompactionPlan(bucket=bucket, inputs=inputs, final=relative(bucket, final),
                                            tmp=relative(bucket, in_progress_name(final, COMPACTION_TAG))))


def _merge(last: SinkState, finishing: SinkState) -> SinkState:
    return SinkState(batch_id=last.batch_id, committed_at=finishing.committed_at,
                     finish=last.finish + finishing.finish, compactions=last.compactions + finishing.compactions,
                     obsolete=last.obsolete)


def resume_finish(sink: RecoveringSink) -> SinkState | None:
    """Driver side, at query start and in :func:`finish`: complete a finish a crash interrupted."""
    meta = sink.meta_directory()
    stored = meta.read(FINISH_INTENT)
    if stored is None:
        return None
    intent = meta.uri(FINISH_INTENT)
    finishing = SinkState.from_json(json.loads(stored.data)["state"], source=intent)
    sink.create_committer().apply(finishing)
    store = sink.state_store()
    last = store.get(finishing.batch_id)
    if last is None:
        raise CommitError(f"{intent} finishes batch {finishing.batch_id}, whose state file is gone")
    if last.held or last.in_progress:
        store.put(_merge(last, finishing))
    fault_point("finish.after_state", batch_id=finishing.batch_id)
    meta.delete(FINISH_INTENT)
    return finishing


def finished_parts(state: SinkState) -> list[PartFile]:
    """The part files the commit of ``state`` finished (published, or compacted away)."""
    return state.finish + [part for plan in state.compactions for part in plan.inputs]


def restore_output(sink: RecoveringSink) -> None:
    """Once per query run: check the commit log and the states against each other, rebuild
    what can be rebuilt exactly (logged as a warning), refuse the start otherwise; then roll
    an unfinished commit forward, complete an interrupted ``sparklink.files.finish``, and
    remove what attempts stored for the last commit's finished files."""
    sink.storage().check_conditional_writes()
    _repair_metadata(sink)
    roll_forward(cast(Sink, sink), CommitLog(sink.commit_log_dir()))  # the file sink is an SDK Sink
    resume_finish(sink)
    sink.part_files().sweep_finished(finished_parts(sink.state_store().latest_before(None)))


def _repair_metadata(sink: RecoveringSink) -> None:
    config = sink.config
    scan = MetadataScan.read(sink.storage())
    base_required = config.rolling_policy.carries_across_batches or config.compaction is not None
    findings = scan.findings(base_required=base_required)
    refused = [f for f in findings if not f.repairable]
    if refused:
        raise MetadataError(f"file sink output {config.path} cannot be restored: "
                            + " | ".join(str(f) for f in refused))
    latest = scan.latest()
    log, store, committer = CommitLog(sink.commit_log_dir()), sink.state_store(), sink.create_committer()
    for finding in findings:
        LOG.warning("file sink %s: recovering from damaged metadata: %s", config.path, finding)
        batch = finding.batch_id
        assert batch is not None  # only the owner claim has none, and it is refused
        if finding.action == REBUILD_STATE:
            entry = scan.entries[batch]
            state = _rebuild_state(sink, scan.states.get(batch - 1), entry, last=batch == latest)
            store.put(state)
            scan.states[batch] = state
            if batch == latest and entry.finished:
                committer.apply(state)
        elif finding.action == REWRITE_ENTRY_FROM_STATE:
            state = scan.states[batch]
            if batch == latest:
                committer.apply(state)
            log.put(CommitLogEntry(key=CommitLog.key_for_batch(batch), batch_id=batch, state=STATE_FINISHED,
                                   committables=[], created_at=state.committed_at, finished_at=time.time(),
                                   extra={REBUILT_KEY: f"from state/{store.path_of(batch).rpartition('/')[2]}; the "
                                                       "entry's list of files is not known"}))
        elif finding.action == REWRITE_ENTRY_FINISHED:
            log.put(CommitLogEntry(key=CommitLog.key_for_batch(batch), batch_id=batch, state=STATE_FINISHED,
                                   committables=[], finished_at=time.time(),
                                   extra={REBUILT_KEY: "the entry was damaged; its list of files is lost"}))


def _rebuild_state(sink: RecoveringSink, previous: SinkState | None, entry: CommitLogEntry, *,
                   last: bool) -> SinkState:
    """State N again from state N-1 and entry N's part files. Time-based rolls are decided at
    the entry's finish time (at or after the original decision, so a superset of its rolls);
    for the last batch, a carried file the original commit did finish is taken as finished."""
    batch = entry.batch_id
    assert batch is not None
    parts = [PartFile.from_json(c) for c in entry.committables]
    state = next_state(previous or empty_state(), batch, parts, now=entry.finished_at or entry.created_at,
                       rolling_policy=sink.config.rolling_policy, compaction=sink.config.compaction,
                       plan_name=lambda bucket, index: sink.plan_name(bucket, batch, index))
    if last:
        part_files = sink.part_files()
        for part in list(state.in_progress):
            if part_files.is_committed(part):
                state.in_progress.remove(part)
                part.state = PENDING
                state.finish.append(part)
    return state
