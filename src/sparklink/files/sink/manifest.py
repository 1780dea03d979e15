"""The manifest of live finished files of one file sink output (driver side).

The committed state of each micro-batch (``_sparklink/state/<batchId>.json``) names the files
its commit finishes. The newest states are kept (between ``STATE_RETENTION`` and twice that
many); every ``STATE_RETENTION`` commits the older ones are folded into
``_sparklink/manifest/compact.json`` (written atomically, idempotent: it records the last
batch it folded) and then purged. The live files are then

* the compacted manifest's ``files`` (path -> commit time),
* plus the finished files of the state files that are still there (newer batches),
* plus the files of ``df.write`` jobs (their ``commits/job-<id>.json`` entries are never purged).

The compacted manifest lists only files that exist: sparklink's compaction works on pending
files before they are committed, so its inputs never enter it. With a retention
(``fileRetention``), a fold moves files committed longer ago than the retention to
``expired``, and deletes an expired file once it is older than the retention plus
``cleanupDelay`` and no file of Spark's log (``_spark_metadata``) names it any more; then it
is dropped from the manifest too. So the manifest's size follows the live files, and is flat
over time with a retention.

``sparklink verify`` uses it to check that no visible file is outside the commit log.

Every object is read and written through the output's storage (:mod:`sparklink.storage`),
local disk or S3, at the names :class:`~sparklink.files.sink.layout.OutputLayout` gives.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from sparklink.errors import CommitError
from sparklink.files.sink.layout import COMPACT_MANIFEST, META_DIR, OutputLayout  # noqa: F401 - META_DIR re-exported
from sparklink.files.sink.options import FileSinkOptions
from sparklink.files.sink.state import SinkState, StateStore
from sparklink.files.spark_log import DEFAULT_CLEANUP_DELAY, SparkLog
from sparklink.options import Options
from sparklink.sink.commit_log import CommitLog, read_unless_damaged
from sparklink.storage.base import FileStorage

MANIFEST_VERSION = 2
STATE_RETENTION = 20


def file_retention(opts: Options) -> float | None:
    """``fileRetention`` in seconds (None: files never expire)."""
    return FileSinkOptions.file_retention.get(opts)


def finished_by(state: SinkState) -> list[str]:
    """Relative paths of the files the commit of ``state`` makes visible."""
    return [part.final for part in state.finish] + [plan.final for plan in state.compactions]


@dataclass(kw_only=True)
class CompactManifest:
    up_to_batch: int = -1
    files: dict[str, float] = field(default_factory=dict)    # relative path -> commit time (epoch s)
    expired: dict[str, float] = field(default_factory=dict)  # past the retention, not deleted yet

    def to_json(self) -> dict:
        return {"v": MANIFEST_VERSION, "upToBatch": self.up_to_batch, "files": self.files, "expired": self.expired}

    @classmethod
    def from_json(cls, data: dict, *, source: str, storage: FileStorage) -> "CompactManifest":
        version = data.get("v")
        if version == 1:  # a list of every file ever finished: keep those that exist
            found = {rel: storage.info(rel) for rel in data["files"]}
            return cls(up_to_batch=int(data["upToBatch"]),
                       files={rel: info.modified_at for rel, info in found.items() if info is not None})
        if version != MANIFEST_VERSION:
            raise CommitError(f"{source}: manifest version {version!r} is not supported")
        return cls(up_to_batch=int(data["upToBatch"]), files={k: float(v) for k, v in data["files"].items()},
                   expired={k: float(v) for k, v in data["expired"].items()})


class FinishedFileManifest:
    """Reads and folds the manifest of one sink output (``storage``: the output's)."""

    def __init__(self, storage: FileStorage, *, retention: float | None = None,
                 cleanup_delay: float = DEFAULT_CLEANUP_DELAY, spark_log: SparkLog | None = None,
                 lenient: bool = False):
        """``lenient``: skip damaged state files and log entries (``verify`` reports them)."""
        layout = OutputLayout(storage)
        self.lenient = lenient
        self.storage = storage
        self.compact_dir = layout.manifest
        self.compact_uri = self.compact_dir.uri(COMPACT_MANIFEST)  # for messages
        self.states = StateStore(layout.states)
        self.commits = CommitLog(layout.commits)
        self.retention = retention
        self.cleanup_delay = cleanup_delay
        self.spark_log = spark_log

    def compacted(self) -> CompactManifest:
        stored = self.compact_dir.read(COMPACT_MANIFEST)
        if stored is None:
            return CompactManifest()
        text = stored.data.decode("utf-8", errors="replace")
        try:
            return CompactManifest.from_json(json.loads(text), source=self.compact_uri, storage=self.storage)
        except (json.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as exc:
            raise CommitError(f"manifest {self.compact_uri} is damaged: {exc}") from exc

    def fold_due(self, batch_id: int) -> bool:
        """True when the oldest state is ``2 * STATE_RETENTION`` batches old (fold in chunks, so
        the compacted manifest is rewritten once every ``STATE_RETENTION`` commits)."""
        ids = self.states.batch_ids()
        return bool(ids) and ids[0] <= batch_id - 2 * STATE_RETENTION

    def fold_before(self, batch_id: int, *, now: float) -> list[str]:
        """Fold the finished files of every state older than ``batch_id`` into the compacted
        manifest, expire and delete files past the retention. Called before those state files
        are purged; safe to repeat. Returns the files it deleted."""
        manifest = self.compacted()
        to_fold = [b for b in self.states.batch_ids() if manifest.up_to_batch < b < batch_id]
        if not to_fold:
            return []
        files, expired = dict(manifest.files), dict(manifest.expired)
        for old in to_fold:
            state = self.states.get(old)
            if state is not None:
                for relative in finished_by(state):
                    files[relative] = state.committed_at
        deleted = []
        if self.retention is not None:
            for relative, committed_at in list(files.items()):
                if now - committed_at > self.retention:
                    expired[relative] = committed_at
                    del files[relative]
            due = [rel for rel, at in expired.items() if now - at > self.retention + self.cleanup_delay]
            referenced = self.spark_log.referenced_keys() if due and self.spark_log is not None else set()
            for relative in due:
                if relative not in referenced:
                    self.storage.delete(relative)
                    del expired[relative]
                    deleted.append(relative)
        folded = CompactManifest(up_to_batch=to_fold[-1], files=files, expired=expired).to_json()
        self.compact_dir.put(COMPACT_MANIFEST, json.dumps(folded).encode("utf-8"))  # replaced whole, atomically
        return deleted

    def finished_files(self) -> set[str]:
        """Every live file the sink has finished (relative to ``root``)."""
        files = set(self.compacted().files)
        for state in self._unfolded_states():
            files.update(finished_by(state))
        for committables in self._finished_jobs():
            files.update(c["final"] for c in committables)
        return files

    def recorded_sizes(self) -> dict[str, int]:
        """The byte length the commit recorded of each finished part file it still knows (the
        states not folded yet and the ``df.write`` jobs; compacted files and folded batches
        record none), for ``verify``."""
        sizes = {part.final: part.length for state in self._unfolded_states() for part in state.finish}
        for committables in self._finished_jobs():
            sizes.update((c["final"], int(c["length"])) for c in committables)
        return sizes

    def _unfolded_states(self) -> list[SinkState]:
        up_to = self.compacted().up_to_batch
        read = (lambda b: read_unless_damaged(self.states.get, b)) if self.lenient else self.states.get
        states = (read(batch) for batch in self.states.batch_ids() if batch > up_to)
        return [state for state in states if state is not None]

    def _finished_jobs(self) -> list[list[dict]]:
        """The committables of every finished ``df.write`` job entry."""
        read = (lambda k: read_unless_damaged(self.commits.get, k)) if self.lenient else self.commits.get
        entries = (read(key) for key in self.commits.job_keys())
        return [entry.committables for entry in entries if entry is not None and entry.finished]

    def expired_files(self) -> set[str]:
        """Files past the retention, dropped from the logs and not deleted yet."""
        return set(self.compacted().expired)

    def total_bytes(self) -> int:
        """Size of sparklink's own log: compacted manifest, state files and commit entries."""
        return sum(d.total_bytes() for d in (self.compact_dir, self.states.dir, self.commits.dir))
