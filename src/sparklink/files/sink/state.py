"""The file sink's committed state, one JSON file per committed micro-batch (driver side).

``<path>/_sparklink/state/<batchId>.json`` is written atomically by the committer of batch N,
right after the SDK has logged ``commits/<batchId>.json`` and before any file is renamed. It
records everything the commit does and everything carried to the next batch:

* ``inProgress``: in-progress files carried across batches (row formats, default rolling
  policy), one per (bucket, partition id), with their valid length;
* ``held``: pending files held for compaction, per bucket, with the batch they wait since;
* ``finish``: pending files this commit renames to their finished names;
* ``compactions``: compactions this commit runs (inputs, temporary and finished names);
* ``obsolete``: superseded hidden files this commit deletes.

Computing state N from state N-1 and batch N's committables happens once; a crash after the
state file is written replays exactly the same actions (idempotent roll-forward). The state
of the last commit is read when the sink is built for the next batch, on the driver, and
travels to the tasks with the pickled sink, so a task of batch N+1 knows which in-progress
file to append to.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from sparklink.errors import CommitError, ConcurrentWriterError, MetadataError
from sparklink.files.sink.part_files import IN_PROGRESS, PENDING, PartFile
from sparklink.sink.commit_log import json_bytes, read_json_object
from sparklink.storage.directory import StorageDirectory

STATE_VERSION = 1
_STATE_FILE = re.compile(r"^(\d+)\.json$")


@dataclass(kw_only=True)
class CompactionPlan:
    """Compact ``inputs`` (pending files of one bucket) into ``tmp``, then rename it to ``final``."""

    bucket: str
    inputs: list[PartFile]
    tmp: str
    final: str

    def to_json(self) -> dict[str, Any]:
        return {"bucket": self.bucket, "inputs": [f.to_json() for f in self.inputs], "tmp": self.tmp, "final": self.final}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "CompactionPlan":
        return cls(bucket=data["bucket"], inputs=[PartFile.from_json(f) for f in data["inputs"]],
                   tmp=data["tmp"], final=data["final"])


@dataclass(kw_only=True)
class SinkState:
    """The committed state after one micro-batch (see the module docstring)."""

    batch_id: int
    committed_at: float
    in_progress: list[PartFile] = field(default_factory=list)
    held: list[PartFile] = field(default_factory=list)
    held_since: dict[str, int] = field(default_factory=dict)
    finish: list[PartFile] = field(default_factory=list)
    compactions: list[CompactionPlan] = field(default_factory=list)
    obsolete: list[str] = field(default_factory=list)

    def referenced(self) -> set[str]:
        """Hidden files the state still needs (they must survive the orphan sweep)."""
        return {f.path for f in self.in_progress} | {f.path for f in self.held}

    def carried_for(self, partition: int) -> dict[str, PartFile]:
        return {f.bucket: f for f in self.in_progress if f.partition == partition}

    def to_json(self) -> dict[str, Any]:
        return {
            "v": STATE_VERSION,
            "batchId": self.batch_id,
            "committedAt": self.committed_at,
            "inProgress": [f.to_json() for f in self.in_progress],
            "held": [f.to_json() for f in self.held],
            "heldSince": self.held_since,
            "finish": [f.to_json() for f in self.finish],
            "compactions": [c.to_json() for c in self.compactions],
            "obsolete": self.obsolete,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any], *, source: str) -> "SinkState":
        if data.get("v") != STATE_VERSION:
            raise MetadataError(f"{source}: file sink state version {data.get('v')!r} is not supported")
        return cls(
            batch_id=data["batchId"],
            committed_at=data["committedAt"],
            in_progress=[PartFile.from_json(f) for f in data["inProgress"]],
            held=[PartFile.from_json(f) for f in data["held"]],
            held_since={k: int(v) for k, v in data["heldSince"].items()},
            finish=[PartFile.from_json(f) for f in data["finish"]],
            compactions=[CompactionPlan.from_json(c) for c in data["compactions"]],
            obsolete=list(data["obsolete"]),
        )


def empty_state() -> SinkState:
    return SinkState(batch_id=-1, committed_at=0.0)


class StateStore:
    """The directory of state files, on local disk or S3 (driver side; one writer: the query
    that owns the sink). A state is created only if none exists for its batch (S3:
    ``If-None-Match: *``); :meth:`put` rewrites one (recovery of a damaged state)."""

    def __init__(self, directory: StorageDirectory):
        self.dir = directory

    @staticmethod
    def _name(batch_id: int) -> str:
        return f"{batch_id}.json"

    def path_of(self, batch_id: int) -> str:
        """The state's path (local disk) or URI (object store), for messages."""
        return self.dir.uri(self._name(batch_id))

    def batch_ids(self) -> list[int]:
        return sorted(int(m.group(1)) for name in self.dir.names() if (m := _STATE_FILE.match(name)))

    def get(self, batch_id: int) -> SinkState | None:
        """State ``batch_id``, None if there is none; MetadataError naming the file if it is
        damaged or holds another batch's state (a copy put in its place)."""
        source = self.dir.uri(self._name(batch_id))
        found = read_json_object(self.dir, self._name(batch_id), what="file sink state")
        if found is None:
            return None
        try:
            state = SinkState.from_json(found[0], source=source)
        except (KeyError, TypeError, ValueError, AttributeError, CommitError) as exc:
            raise MetadataError(f"file sink state {source} is damaged: {exc}") from None
        if state.batch_id != batch_id:
            raise MetadataError(f"file sink state {source} is damaged: it holds the state of batch {state.batch_id}")
        return state

    def latest_before(self, batch_id: int | None) -> SinkState:
        """The state of the last commit before ``batch_id`` (None: the last one), or an empty state."""
        ids = [b for b in self.batch_ids() if batch_id is None or b < batch_id]
        if not ids:
            return empty_state()
        state = self.get(ids[-1])
        if state is None:
            raise MetadataError(f"file sink state {self.dir.uri(self._name(ids[-1]))} disappeared while it was read")
        return state

    def create(self, state: SinkState) -> None:
        """Write the state of a new commit; ConcurrentWriterError if it appeared meanwhile."""
        if self.dir.create_if_absent(self._name(state.batch_id), json_bytes(state.to_json())) is None:
            raise ConcurrentWriterError(f"file sink state {self.dir.uri(self._name(state.batch_id))} was written by "
                                        "another writer while this query committed its batch")

    def put(self, state: SinkState) -> None:
        self.dir.put(self._name(state.batch_id), json_bytes(state.to_json()))

    def purge_before(self, batch_id: int) -> None:
        for old in self.batch_ids():
            if old >= batch_id:
                break
            self.dir.delete(self._name(old))


def next_state(previous: SinkState, batch_id: int, committables: list[PartFile], *, now: float,
               rolling_policy: Any, compaction: Any, plan_name: Any) -> SinkState:
    """State N from state N-1 and batch N's part files (driver, once per batch).

    ``rolling_policy`` decides time-based rolls of carried files; ``compaction`` (a
    FileCompactStrategy or None) decides which held files to compact; ``plan_name(bucket,
    index)`` gives the temporary and finished relative names of a compaction output.
    """
    superseded = {c.base_path for c in committables if c.base_path}
    obsolete = sorted({c.base_path for c in committables if c.base_path and not c.in_place})
    carried: dict[tuple[str, int], PartFile] = {}
    pending: list[PartFile] = []
    for old in previous.in_progress:
        if old.path not in superseded:
            carried[(old.bucket, old.partition)] = old
    for part in committables:
        if part.state == IN_PROGRESS:
            key = (part.bucket, part.partition)
            displaced = carried.pop(key, None)
            if displaced is not None:  # a task did not continue a carried file: finish it, lose nothing
                displaced.state = PENDING
                pending.append(displaced)
            carried[key] = part
        else:
            pending.append(part)
    for key, part in list(carried.items()):
        if rolling_policy.should_roll_on_time(created_at=part.created_at, last_write_at=part.last_write_at, now=now) \
                or rolling_policy.should_roll_on_size(part.length):
            del carried[key]
            part.state = PENDING
            pending.append(part)
    state = SinkState(batch_id=batch_id, committed_at=now, in_progress=sorted(carried.values(), key=lambda f: f.path),
                      obsolete=obsolete)
    if compaction is None:
        state.finish = previous.held + pending  # compaction switched off: release anything still held
        return state
    held: dict[str, list[PartFile]] = {}
    for part in previous.held + pending:
        held.setdefault(part.bucket, []).append(part)
    since = {b: previous.held_since.get(b, batch_id) for b in held}
    for bucket in sorted(held):
        files = held[bucket]
        if compaction.should_compact(total_size=sum(f.length for f in files), waited=batch_id - since[bucket] + 1):
            if len(files) == 1:
                state.finish.append(files[0])
            else:
                tmp, final = plan_name(bucket, len(state.compactions))
                state.compactions.append(CompactionPlan(bucket=bucket, inputs=files, tmp=tmp, final=final))
        else:
            state.held.extend(files)
            state.held_since[bucket] = since[bucket]
    return state
