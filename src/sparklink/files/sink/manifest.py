"""The manifest of finished files: every file a file sink ever made visible (driver side).

The committed state of each micro-batch (``_sparklink/state/<batchId>.json``) names the files
its commit finishes, but old state files are purged to keep the metadata small. Before they
are purged, their finished files are folded into ``_sparklink/manifest/compact.json``
(written atomically, idempotent: it records the last batch it folded). The full list is then

* the compacted manifest,
* plus the finished files of the state files that are still there (newer batches),
* plus the files of ``df.write`` jobs (their ``commits/job-<id>.json`` entries are never purged).

``sparklink verify`` uses it to check that no visible file is outside the commit log.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from sparklink.errors import CommitError
from sparklink.files.sink.state import SinkState, StateStore
from sparklink.sink.commit_log import CommitLog, write_json_atomically

MANIFEST_VERSION = 1
META_DIR = "_sparklink"


def finished_by(state: SinkState) -> list[str]:
    """Relative paths of the files the commit of ``state`` makes visible."""
    return [part.final for part in state.finish] + [plan.final for plan in state.compactions]


@dataclass(kw_only=True)
class CompactManifest:
    up_to_batch: int = -1
    files: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"v": MANIFEST_VERSION, "upToBatch": self.up_to_batch, "files": self.files}

    @classmethod
    def from_json(cls, data: dict, *, source: str) -> "CompactManifest":
        if data.get("v") != MANIFEST_VERSION:
            raise CommitError(f"{source}: manifest version {data.get('v')!r} is not supported")
        return cls(up_to_batch=int(data["upToBatch"]), files=list(data["files"]))


class FinishedFileManifest:
    """Reads and folds the manifest of one sink output (``root`` is the sink's ``path``)."""

    def __init__(self, root: str | Path):
        self.root = Path(root)
        self.meta = self.root / META_DIR
        self.compact_path = self.meta / "manifest" / "compact.json"
        self.states = StateStore(self.meta / "state")
        self.commits = CommitLog(self.meta / "commits")

    def compacted(self) -> CompactManifest:
        try:
            text = self.compact_path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return CompactManifest()
        try:
            return CompactManifest.from_json(json.loads(text), source=str(self.compact_path))
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise CommitError(f"manifest {self.compact_path} is damaged: {exc}") from exc

    def fold_before(self, batch_id: int) -> None:
        """Fold the finished files of every state older than ``batch_id`` into the compacted
        manifest. Called before those state files are purged; safe to repeat."""
        manifest = self.compacted()
        to_fold = [b for b in self.states.batch_ids() if manifest.up_to_batch < b < batch_id]
        if not to_fold:
            return
        files = set(manifest.files)
        for old in to_fold:
            state = self.states.get(old)
            if state is not None:
                files.update(finished_by(state))
        write_json_atomically(self.compact_path, CompactManifest(up_to_batch=to_fold[-1], files=sorted(files)).to_json())

    def finished_files(self) -> set[str]:
        """Every file the sink has finished (relative to ``root``)."""
        manifest = self.compacted()
        files = set(manifest.files)
        for batch in self.states.batch_ids():
            if batch > manifest.up_to_batch:
                state = self.states.get(batch)
                if state is not None:
                    files.update(finished_by(state))
        for key in self.commits.job_keys():
            entry = self.commits.get(key)
            if entry is not None and entry.finished:
                files.update(c["final"] for c in entry.committables)
        return files
