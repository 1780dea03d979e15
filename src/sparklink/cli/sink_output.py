"""Reading a file sink's output directory without Spark (for ``inspect`` and ``verify``).

Classifies every file under the sink's ``path``:

* finished: visible part files (names not starting with ``.`` or ``_``);
* in-progress: hidden part files the last committed state carries across batches;
* pending: hidden part files held for compaction, or named by a commit not finished yet;
* orphan: hidden part files that nothing committed refers to (left by failed attempts).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from sparklink.errors import DataError
from sparklink.files.path_scheme import local_path
from sparklink.files.sink.manifest import META_DIR, FinishedFileManifest
from sparklink.files.sink.part_files import parse_in_progress
from sparklink.sink.commit_log import CommitLog, read_unless_damaged

SUFFIX_FORMATS = {".parquet": "parquet", ".json": "json", ".jsonl": "json", ".csv": "csv", ".txt": "text",
                  ".avro": "avro", ".orc": "orc"}


@dataclass
class FileGroup:
    count: int = 0
    bytes: int = 0
    paths: list[str] = field(default_factory=list)

    def add(self, relative: str, size: int) -> None:
        self.count += 1
        self.bytes += size
        self.paths.append(relative)


@dataclass
class SinkOutput:
    """A snapshot of one sink output directory."""

    root: Path
    committed_batches: list[int]
    job_commits: int
    unfinished_commits: list[str]
    last_commit_time: float | None
    buckets: list[str]
    finished: FileGroup
    in_progress: FileGroup
    pending: FileGroup
    orphans: FileGroup
    other_visible: list[str]

    @classmethod
    def load(cls, root: str | Path) -> "SinkOutput":
        root = Path(local_path("PATH", str(root)))  # s3://... is refused, never read as a local path
        if not (root / META_DIR / "commits").is_dir():
            raise DataError(f"{root} is not a sparklink file sink output (no {META_DIR}/commits directory)")
        log = CommitLog(root / META_DIR / "commits")
        manifest = FinishedFileManifest(root)
        batches = log.batch_ids()
        keys = [CommitLog.key_for_batch(b) for b in batches] + log.job_keys()
        entries = [e for e in (read_unless_damaged(log.get, k) for k in keys) if e is not None]
        unfinished = [e.key for e in entries if not e.finished]
        finished_times = [e.finished_at for e in entries if e.finished_at]
        state_ids = manifest.states.batch_ids()
        state = read_unless_damaged(manifest.states.get, state_ids[-1]) if state_ids else None
        carried = {p.path for p in state.in_progress} if state else set()
        held = {p.path for p in state.held} if state else set()
        named_by_unfinished = {c.get("path") for e in entries if not e.finished for c in e.committables}
        output = cls(root=root, committed_batches=batches, job_commits=len(log.job_keys()),
                     unfinished_commits=unfinished, last_commit_time=max(finished_times) if finished_times else None,
                     buckets=[], finished=FileGroup(), in_progress=FileGroup(), pending=FileGroup(),
                     orphans=FileGroup(), other_visible=[])
        buckets = set()
        for directory, subdirs, files in os.walk(root):
            if Path(directory) == root:
                subdirs[:] = [d for d in subdirs if d != META_DIR]
            for name in files:
                path = Path(directory, name)
                relative = str(path.relative_to(root))
                size = path.stat().st_size
                if parse_in_progress(name) is not None:
                    if relative in carried:
                        output.in_progress.add(relative, size)
                    elif relative in held or relative in named_by_unfinished:
                        output.pending.add(relative, size)
                    else:
                        output.orphans.add(relative, size)
                elif not _hidden(Path(relative)):
                    output.finished.add(relative, size)
                    buckets.add(str(Path(relative).parent))
        output.buckets = sorted(buckets)
        return output

    def to_json(self) -> dict:
        def group(g: FileGroup) -> dict:
            return {"count": g.count, "bytes": g.bytes}

        return {
            "path": str(self.root),
            "committedBatches": len(self.committed_batches),
            "firstBatch": self.committed_batches[0] if self.committed_batches else None,
            "lastBatch": self.committed_batches[-1] if self.committed_batches else None,
            "jobCommits": self.job_commits,
            "unfinishedCommits": self.unfinished_commits,
            "lastCommitTime": self.last_commit_time,
            "buckets": self.buckets,
            "finished": group(self.finished),
            "inProgress": group(self.in_progress),
            "pending": group(self.pending),
            "orphans": group(self.orphans),
        }


def _hidden(relative: Path) -> bool:
    return any(part.startswith((".", "_")) for part in relative.parts)


def format_of(path: Path, override: str | None) -> str:
    if override:
        return override
    fmt = SUFFIX_FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise DataError(f"{path}: cannot tell the file format from the suffix '{path.suffix}'; pass --format")
    return fmt


def read_table(path: Path, fmt: str) -> pa.Table:
    """Read one finished file completely; raises DataError naming the file if it does not read."""
    try:
        if fmt == "parquet":
            import pyarrow.parquet as pq

            return pq.read_table(path)
        if fmt == "orc":
            import pyarrow.orc as orc

            return orc.read_table(path)
        if fmt == "csv":
            import pyarrow.csv as pacsv

            return pacsv.read_csv(path)
        if fmt == "json":
            rows = []
            with open(path, encoding="utf-8") as handle:
                for number, line in enumerate(handle, start=1):
                    if line.strip():
                        try:
                            rows.append(json.loads(line))
                        except json.JSONDecodeError as exc:
                            raise DataError(f"{path}, line {number}: not valid JSON: {exc}") from None
            return pa.Table.from_pylist(rows)
        if fmt == "avro":
            import fastavro

            with open(path, "rb") as handle:
                return pa.Table.from_pylist(list(fastavro.reader(handle)))
        if fmt == "text":
            lines = path.read_text(encoding="utf-8").splitlines()
            return pa.table({"value": lines})
    except DataError:
        raise
    except (OSError, EOFError, ValueError, pa.ArrowException) as exc:
        raise DataError(f"{path}: does not read as {fmt}: {exc}") from None
    raise DataError(f"{path}: unknown format '{fmt}'")
