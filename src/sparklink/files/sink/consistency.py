"""The file sink's metadata checked against itself: commit log, committed states, owner claim.

Runs on the driver, in the sink's once-per-run restore and in ``sparklink verify`` (which
only reports). What is checked, and what recovery does about it:

* a committed batch whose state (``state/<N>.json``) is missing, empty, cut short, garbage or
  holds another batch's state: rebuilt from its commit log entry (the batch's part files) and
  the state before it, then made true on disk if it is the last commit. If the state before
  it is gone too and the sink carries files across batches or holds them for compaction, the
  carried/held files cannot be known: refused.
* a state whose commit log entry is missing or damaged: the entry was written before the
  state, so the batch is committed; the entry is rewritten from the state.
* a damaged commit log entry without a state: if later batches exist it was finished (only
  the last entry can be open), so it is rewritten as a finished entry (its file list is
  lost: ``verify`` can no longer attribute that batch's files); if it is the last one, what it
  committed cannot be known: refused.
* an owner claim that does not parse: refused (it cannot tell which query owns the output).

Every object is read through the output's storage (local disk or S3) at the names of
:class:`~sparklink.files.sink.layout.OutputLayout`.

States older than the retention (``STATE_RETENTION`` batches behind the last commit) are
purged on purpose and not asked for.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sparklink.errors import MetadataError
from sparklink.files.sink.layout import OutputLayout
from sparklink.files.sink.manifest import STATE_RETENTION
from sparklink.files.sink.part_files import IN_PROGRESS
from sparklink.files.sink.state import SinkState, StateStore
from sparklink.sink.commit_log import CommitLog, CommitLogEntry, OwnerLock, owner_lock_at
from sparklink.storage.base import FileStorage

REBUILD_STATE = "rebuild-state"
REWRITE_ENTRY_FROM_STATE = "rewrite-entry-from-state"
REWRITE_ENTRY_FINISHED = "rewrite-entry-finished"
REFUSE = "refuse"
REBUILT_KEY = "rebuilt"  # in the extra of a log entry recovery rewrote: its committables are not the batch's


@dataclass(frozen=True, kw_only=True)
class Finding:
    """One inconsistency: the file, what is wrong, and what recovery does (or the way out)."""

    path: str  # the file's path (local disk) or URI (object store)
    batch_id: int | None
    problem: str
    action: str
    remedy: str

    @property
    def repairable(self) -> bool:
        return self.action != REFUSE

    def __str__(self) -> str:
        return f"{self.path}: {self.problem}; {self.remedy}"


@dataclass(kw_only=True)
class MetadataScan:
    """Everything under ``<path>/_sparklink`` read once, damaged files noted (never raised)."""

    storage: FileStorage  # the output's
    entries: dict[int, CommitLogEntry] = field(default_factory=dict)
    bad_entries: dict[int, str] = field(default_factory=dict)
    states: dict[int, SinkState] = field(default_factory=dict)
    bad_states: dict[int, str] = field(default_factory=dict)
    owner_problem: str | None = None

    @property
    def layout(self) -> OutputLayout:
        return OutputLayout(self.storage)

    @property
    def log(self) -> CommitLog:
        return CommitLog(self.layout.commits)

    @property
    def store(self) -> StateStore:
        return StateStore(self.layout.states)

    def _owner_lock(self) -> OwnerLock:
        return owner_lock_at(self.layout.owner, location_for_messages=self.storage.describe())

    def _owner_lock_uri(self) -> str:
        return self.layout.owner.uri()

    @classmethod
    def read(cls, storage: FileStorage) -> "MetadataScan":
        """Read the metadata of the output on ``storage``."""
        scan = cls(storage=storage)
        log, store = scan.log, scan.store
        for batch in log.batch_ids():
            try:
                entry = log.get(CommitLog.key_for_batch(batch))
            except MetadataError as exc:
                scan.bad_entries[batch] = str(exc)
                continue
            if entry is not None:
                scan.entries[batch] = entry
        for batch in store.batch_ids():
            try:
                state = store.get(batch)
            except MetadataError as exc:
                scan.bad_states[batch] = str(exc)
                continue
            if state is not None:
                scan.states[batch] = state
        try:
            scan._owner_lock().owner()
        except MetadataError as exc:
            scan.owner_problem = str(exc)
        return scan

    def batches(self) -> list[int]:
        return sorted(set(self.entries) | set(self.bad_entries) | set(self.states) | set(self.bad_states))

    def latest(self) -> int | None:
        batches = self.batches()
        return batches[-1] if batches else None

    def findings(self, *, base_required: bool) -> list[Finding]:
        """The inconsistencies, oldest batch first. ``base_required``: the sink carries files
        across batches or holds them for compaction, so a state cannot be rebuilt without the
        state before it (``verify`` does not know the options and asks
        :meth:`carries_or_holds`)."""
        findings: list[Finding] = []
        if self.owner_problem is not None:
            findings.append(Finding(path=self._owner_lock_uri(), batch_id=None,
                                    problem=self.owner_problem, action=REFUSE, remedy="the query does not start"))
        latest = self.latest()
        if latest is None:
            return findings
        known_states = set(self.states)
        first_logged = min(self.entries) if self.entries else None
        for batch in self.batches():
            entry_path, state_path = self.log.path_of(str(batch)), self.store.path_of(batch)
            entry_name = f"commits/{entry_path.rpartition('/')[2]}"
            state_name = f"state/{state_path.rpartition('/')[2]}"
            entry_ok, state_ok = batch in self.entries, batch in self.states
            if state_ok and not entry_ok:
                problem = self.bad_entries.get(batch, f"commit log entry {entry_path} is missing")
                findings.append(Finding(path=entry_path, batch_id=batch, problem=_short(problem, entry_path),
                                        action=REWRITE_ENTRY_FROM_STATE,
                                        remedy=f"recovery rewrites it from {state_name} (the batch is committed)"))
                continue
            if entry_ok and not state_ok:
                entry = self.entries[batch]
                if batch < latest - STATE_RETENTION:
                    continue  # purged on purpose
                if not entry.finished and batch == latest and batch not in self.bad_states:
                    continue  # a commit a crash interrupted before its state: rolled forward as usual
                problem = self.bad_states.get(batch, f"file sink state {state_path} is missing")
                rewritten = REBUILT_KEY in entry.extra  # by an earlier recovery: it lists no files
                if rewritten and batch < latest:
                    continue  # nothing to rebuild from; later states do not need it
                base_known = (batch - 1 in known_states or not base_required
                              or (first_logged == 0 and batch == 0))
                if base_known and not rewritten:
                    known_states.add(batch)
                    findings.append(Finding(path=state_path, batch_id=batch, problem=_short(problem, state_path),
                                            action=REBUILD_STATE,
                                            remedy=f"recovery rebuilds it from {entry_name} and the state "
                                                   f"before it"))
                else:
                    why_not = (f"{entry_name} was itself rewritten by an earlier recovery and lists no files"
                               if rewritten else f"the state of batch {batch - 1} (the files carried or held for "
                                                 "compaction before it) is gone too")
                    findings.append(Finding(path=state_path, batch_id=batch, problem=_short(problem, state_path),
                                            action=REFUSE,
                                            remedy=f"it cannot be rebuilt: {why_not}. Restore {state_path} from a "
                                                   "backup; or stop writing to this output and start the query on "
                                                   "a new path and checkpoint"))
                continue
            if not entry_ok and not state_ok:
                problem = self.bad_entries.get(batch) or self.bad_states.get(batch) or "damaged"
                if batch < latest:
                    findings.append(Finding(path=entry_path, batch_id=batch, problem=_short(problem, entry_path),
                                            action=REWRITE_ENTRY_FINISHED,
                                            remedy="later batches are committed, so this one was finished: "
                                                   "recovery rewrites it as a finished entry (the list of files it "
                                                   "made visible is lost)"))
                else:
                    findings.append(Finding(path=entry_path, batch_id=batch, problem=_short(problem, entry_path),
                                            action=REFUSE,
                                            remedy=f"what micro-batch {batch} committed cannot be known (no "
                                                   f"readable {state_name} either). Restore the file from a "
                                                   "backup; or stop writing to this output and start the query on "
                                                   "a new path and checkpoint"))
        return findings

    def carries_or_holds(self) -> bool:
        """Whether the metadata shows files carried across batches or held for compaction (what
        ``verify``, which does not know the sink's options, assumes about rebuilding)."""
        return any(state.in_progress or state.held for state in self.states.values()) or any(
            c.get("state") == IN_PROGRESS for entry in self.entries.values() for c in entry.committables)

    def may_have_finished(self, relative: str) -> bool:
        """Whether the visible file ``relative`` may have been finished by a committed batch whose
        state is missing or damaged: its entry lists the file, or the name is one of that
        batch's compaction outputs (``<prefix>-c<batch>-<n>``)."""
        name = relative.rpartition("/")[2]
        for batch, entry in self.entries.items():
            if batch in self.states:
                continue
            if any(c.get("final") == relative for c in entry.committables) or f"-c{batch:08d}-" in name:
                return True
        return False


def _short(problem: str, path: str) -> str:
    """The problem without a repeated file name (findings print the path first)."""
    return problem.replace(f" {path}", "")
