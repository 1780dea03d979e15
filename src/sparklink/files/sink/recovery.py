"""The parts of ``sparklink.files.finish`` that a restart of the query also runs (driver side):
the sink's record, the finishing state, and resuming a finish a crash interrupted.

:mod:`sparklink.files.sink.connector` runs :func:`record_sink` when the sink is built and
:func:`resume_finish` in its restore; :mod:`sparklink.files.sink.finish` decides a finish
(:func:`finishing_state`), writes its intent and calls :func:`resume_finish`. This module imports
neither of them (the connector is only a type here), so they no longer import each other.

Persisted formats: ``_sparklink/sink.json`` (``v`` 1: the sink's options without ``path``,
``checkpointLocation``, ``queryName`` and the S3 credentials, and its schema) and
``_sparklink/finish.json`` (``v`` 1: the finishing state), both written through the output's
storage (:mod:`sparklink.storage`), local disk or S3.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from sparklink.errors import CommitError
from sparklink.faults import fault_point
from sparklink.files.sink.layout import FINISH_INTENT, SINK_RECORD  # noqa: F401 - SINK_RECORD re-exported
from sparklink.files.sink.part_files import (COMPACTION_TAG, PENDING, PartFile, finished_name, in_progress_name,
                                             relative)
from sparklink.files.sink.state import CompactionPlan, SinkState
from sparklink.sink.commit_log import json_bytes
from sparklink.storage.directory import StorageDirectory
from sparklink.storage.s3_config import OPTION_S3_ACCESS_KEY_ID, SECRET_OPTIONS

if TYPE_CHECKING:
    from sparklink.files.sink.connector import FileSinkConnector

RECORD_VERSION = 1
# no secret on disk, and no half of a key pair: a finish takes credentials from its options or the environment
CREDENTIAL_OPTIONS = tuple(o.lower() for o in SECRET_OPTIONS + (OPTION_S3_ACCESS_KEY_ID,))
_NOT_RECORDED = ("path", "checkpointlocation", "queryname") + CREDENTIAL_OPTIONS


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


def finishing_state(sink: "FileSinkConnector", last: SinkState, *, now: float) -> SinkState | None:
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


def _plan(sink: "FileSinkConnector", state: SinkState, bucket: str, inputs: list[PartFile], *, batch_id: int) -> None:
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


def resume_finish(sink: "FileSinkConnector") -> SinkState | None:
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
