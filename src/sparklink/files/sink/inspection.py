"""What a file sink's output holds and whether its invariants hold, read without Spark (driver
side): the ``sparklink inspect`` and ``sparklink verify`` commands print what this module finds.

The output is a local directory or an S3 prefix (``s3://`` / ``s3a://``); both are read through
the storage seam (:mod:`sparklink.storage`), so the classification is written once. S3
settings come from the standard AWS environment and config files (``AWS_ENDPOINT_URL_S3``,
``AWS_ACCESS_KEY_ID``, ``AWS_PROFILE``, ...) or from the ``s3.*`` options a caller passes;
no secret is ever part of what is shown. Every object under the sink's ``path`` is classified:

* finished: visible part files (no name segment starting with ``.`` or ``_``);
* in-progress: part files the last committed state carries across batches (local disk: hidden
  files; S3: multipart uploads, their tail objects counted with them);
* pending: part files held for compaction, or named by a commit not finished yet (local disk
  and S3 with compaction: hidden files; S3: uploads named by the commit);
* orphan: hidden part files, tail objects and (S3) incomplete multipart uploads that nothing
  committed refers to (left by failed attempts, or by a copy a crash interrupted).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import pyarrow as pa

from sparklink import formats
from sparklink.errors import DataError, StorageError
from sparklink.files.sink.consistency import MetadataScan
from sparklink.files.sink.layout import FINISH_INTENT, META_DIR, OutputLayout
from sparklink.files.sink.manifest import FinishedFileManifest
from sparklink.files.sink.output_schema import TYPED_FORMATS, file_schema_problem, recorded_arrow_schema
from sparklink.files.sink.part_files import parse_in_progress
from sparklink.files.sink.recovery import recorded_retention
from sparklink.files.spark_log import METADATA_DIR, SparkLog
from sparklink.formats.base import format_of_suffix
from sparklink.sink.commit_log import CommitLog, read_unless_damaged
from sparklink.storage import FileStorage, open_storage, parse_location
from sparklink.storage.output import OutputStorage
from sparklink.storage.recoverable import RecoverableWriter, Staging


@dataclass
class FileGroup:
    """Files of one kind: relative key -> size in bytes (an upload: ``key (upload <id>)``)."""

    sizes: dict[str, int] = field(default_factory=dict)

    def add(self, relative: str, size: int) -> None:
        self.sizes[relative] = size

    @property
    def count(self) -> int:
        return len(self.sizes)

    @property
    def bytes(self) -> int:
        return sum(self.sizes.values())

    @property
    def paths(self) -> list[str]:
        return list(self.sizes)


@dataclass(frozen=True)
class OutputStore:
    """Where a sink output lives: its storage, its part files, its path or URI."""

    storage: FileStorage
    part_files: RecoverableWriter
    uri: str

    @classmethod
    def open(cls, path: str | Path, options: Mapping[str, str] | None = None) -> "OutputStore":
        """``path`` as the CLI's ``PATH`` argument: a local path, ``file:`` URI or S3 URI (any
        other scheme is refused naming it); ``options``: ``s3.*`` settings (default: the AWS
        environment)."""
        output = OutputStorage.from_options(parse_location("PATH", str(path)), options or {})
        storage = open_storage(output.location, options or {})  # its own client: the settings of this call
        return cls(storage=storage, part_files=output.part_files(storage), uri=output.uri())

    def describe(self) -> str:
        """The output and, on S3, the endpoint and where credentials come from (never a secret)."""
        return self.storage.describe()

    def manifest(self) -> FinishedFileManifest:
        return FinishedFileManifest(self.storage, lenient=True)

    def scan(self) -> MetadataScan:
        return MetadataScan.read(self.storage)


@dataclass
class SinkOutput:
    """A snapshot of one sink output (local directory or S3 prefix)."""

    root: Path | str
    store: OutputStore
    committed_batches: list[int]
    job_commits: int
    unfinished_commits: list[str]
    last_commit_time: float | None
    buckets: list[str]
    finished: FileGroup
    in_progress: FileGroup
    pending: FileGroup
    orphans: FileGroup
    #: the orphans by kind: hidden part files (local disk; S3 with compaction), tail objects (S3)
    #: and incomplete multipart uploads (S3, as ``(relative key, upload id)``)
    orphan_parts: list[str] = field(default_factory=list)
    orphan_tails: list[str] = field(default_factory=list)
    orphan_uploads: list[tuple[str, str]] = field(default_factory=list)
    #: committed but hidden: files the last state holds for compaction (a subset of ``pending``)
    held: FileGroup = field(default_factory=FileGroup)
    #: ``_sparklink/finish.json``: a finish decided and not completed
    finish_pending: bool = False

    def hidden_committed(self) -> str | None:
        """The finding "committed rows are hidden" (held files, carried files, a pending finish)
        with the command that clears it; None when every committed file is visible."""
        parts = []
        if self.held.count:
            parts.append(f"{self.held.count} file(s) held for compaction ({_bytes(self.held.bytes)})")
        if self.in_progress.count:
            parts.append(f"{self.in_progress.count} carried file(s) ({_bytes(self.in_progress.bytes)})")
        if self.finish_pending:
            parts.append(f"an interrupted finish ({META_DIR}/{FINISH_INTENT})")
        if not parts:
            return None
        return (f"committed rows are hidden from readers: {', '.join(parts)}; run `sparklink finish {self.root}` "
                "(or sparklink.files.finish(spark, path)) once no query writes the output, or restart the query "
                "and let it end")

    @classmethod
    def load(cls, path: str | Path, *, options: Mapping[str, str] | None = None) -> "SinkOutput":
        store = OutputStore.open(path, options)
        storage = store.storage
        if next(iter(storage.list(f"{META_DIR}/")), None) is None:
            if next(iter(storage.list()), None) is None and not _local_directory(path):
                raise DataError(f"{store.uri} does not exist (nothing at that path)")
            raise DataError(f"{store.uri} is not a sparklink file sink output (no {META_DIR} metadata)")
        log = CommitLog(OutputLayout(storage).commits)
        manifest = store.manifest()
        batches = log.batch_ids()
        keys = [CommitLog.key_for_batch(b) for b in batches] + log.job_keys()
        entries = [e for e in (read_unless_damaged(log.get, k) for k in keys) if e is not None]
        unfinished = [e.key for e in entries if not e.finished]
        finished_times = [e.finished_at for e in entries if e.finished_at]
        state_ids = manifest.states.batch_ids()
        state = read_unless_damaged(manifest.states.get, state_ids[-1]) if state_ids else None
        carried = state.in_progress if state else []
        held = state.held if state else []
        named_by_unfinished = [c for e in entries if not e.finished for c in e.committables]
        output = cls(root=store.uri, store=store,
                     committed_batches=batches, job_commits=len(log.job_keys()), unfinished_commits=unfinished,
                     last_commit_time=max(finished_times) if finished_times else None, buckets=[],
                     finished=FileGroup(), in_progress=FileGroup(), pending=FileGroup(), orphans=FileGroup())
        carried_paths = {p.path for p in carried}
        pending_paths = {p.path for p in held} | {c.get("path") for c in named_by_unfinished}
        carried_staging = [r for r in (store.part_files.staging_of(p.extra) for p in carried) if r is not None]
        carried_tails = {key for r in carried_staging for key in r.auxiliary}
        buckets = set()
        for info in storage.list():
            relative = info.key
            if relative.startswith(f"{META_DIR}/"):
                continue
            name = relative.rpartition("/")[2]
            if parse_in_progress(name) is not None:
                if relative in carried_paths:
                    output.in_progress.add(relative, info.size)
                elif relative in pending_paths:
                    output.pending.add(relative, info.size)
                else:
                    output.orphans.add(relative, info.size)
                    output.orphan_parts.append(relative)
            elif store.part_files.auxiliary_owner(name) is not None:
                if relative not in carried_tails:  # a carried file's tail is counted with its upload
                    output.orphans.add(relative, info.size)
                    output.orphan_tails.append(relative)
            elif not _hidden(relative):
                output.finished.add(relative, info.size)
                buckets.add(str(PurePosixPath(relative).parent))
        output.buckets = sorted(buckets)
        held_paths = {p.path for p in held}
        output.held.sizes.update({k: v for k, v in output.pending.sizes.items() if k in held_paths})
        output.finish_pending = OutputLayout(storage).meta.read(FINISH_INTENT) is not None
        output._classify_unlisted(store.part_files, carried_staging, [p.extra for p in held] +
                                  [c.get("extra") or {} for c in named_by_unfinished], [p.extra for p in held])
        return output

    def _classify_unlisted(self, part_files: RecoverableWriter, carried: list[Staging],
                           pending_extras: list[Mapping[str, Any]], held_extras: list[Mapping[str, Any]]) -> None:
        """Every file being written that a listing does not show (S3: each incomplete multipart
        upload under the output, every page) is a carried file, a pending one, or an orphan."""
        carried_ids = {r.id: r for r in carried}
        pending_ids = {r.id: r for r in (part_files.staging_of(e) for e in pending_extras) if r is not None}
        held_ids = {r.id for r in (part_files.staging_of(e) for e in held_extras) if r is not None}
        for key, staging_id in part_files.unlisted():
            label = f"{key} (upload {staging_id})"
            if staging_id in carried_ids:
                self.in_progress.add(label, carried_ids[staging_id].size)
            elif staging_id in pending_ids:
                self.pending.add(label, pending_ids[staging_id].size)
                if staging_id in held_ids:
                    self.held.add(label, pending_ids[staging_id].size)
            else:
                self.orphans.add(label, part_files.unlisted_size(key, staging_id))
                self.orphan_uploads.append((key, staging_id))

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
            "held": group(self.held),
            "finishPending": self.finish_pending,
            "hiddenCommitted": self.hidden_committed(),
        }


def _bytes(size: int) -> str:
    return f"{size} bytes" if size < 1024 * 1024 else f"{size / 1024 / 1024:.1f} MB"


def _local_directory(path: str | Path) -> bool:
    """Whether ``path`` names an existing, empty place (a local directory; the storage seam answers per store)."""
    return parse_location("path", str(path)).is_empty_directory()


def _hidden(relative: str) -> bool:
    return any(part.startswith((".", "_")) for part in relative.split("/"))


def format_of(relative: str, override: str | None) -> str:
    if override:
        return override
    suffix = PurePosixPath(relative).suffix
    fmt = format_of_suffix(suffix)
    if fmt is None:
        raise DataError(f"{relative}: cannot tell the file format from the suffix '{suffix}'; pass --format")
    return fmt


def read_table(store: OutputStore, relative: str, fmt: str) -> pa.Table:
    """Read one finished file completely (local disk or ranged GETs on S3) with its format's
    reader (:func:`sparklink.formats.read_table`); raises DataError naming the file if it
    does not read. A failing store (StorageError) is not a bad file and propagates."""
    name = store.storage.uri(relative)
    try:
        with store.storage.open_input(relative) as source:
            return formats.read_table(fmt, source, name)
    except (DataError, StorageError):
        raise
    except (OSError, EOFError, ValueError, pa.ArrowException) as exc:
        raise DataError(f"{name}: does not read as {fmt}: {exc}") from None


def find_violations(path: str | Path, *, key: str | None = None, fmt: str | None = None,
                    options: Mapping[str, str] | None = None) -> tuple[list[str], dict]:
    """The list of violations (empty when the output is sound) and a few counts. ``path`` is a
    local directory or an S3 URI (``options``: ``s3.*`` settings; default: the AWS environment)."""
    output = SinkOutput.load(path, options=options)
    store = output.store
    scan = store.scan()
    violations = [f"metadata: {finding}" for finding in scan.findings(base_required=scan.carries_or_holds())]
    violations += [f"commit {key_} is not finished (restart the query to roll it forward)"
                   for key_ in output.unfinished_commits]
    hidden = output.hidden_committed()
    if hidden is not None:
        violations.append(hidden)
    manifest = store.manifest()
    committed, expired = manifest.finished_files(), manifest.expired_files()
    visible = output.finished.sizes
    for missing in sorted(committed - set(visible)):
        violations.append(f"committed file {missing} is missing")
    for name, size in sorted(manifest.recorded_sizes().items()):
        if name in visible and visible[name] != size:
            violations.append(f"committed file {name} holds {visible[name]} bytes, not the {size} its commit recorded")
    for stray in sorted(set(visible) - committed - expired):
        if not scan.may_have_finished(stray):
            violations.append(f"visible file {stray} is not in the commit log")
    violations.extend(spark_log_violations(store.storage, committed, expired, visible))
    for orphan in output.orphan_parts:
        violations.append(f"orphaned part file {orphan} is left over from a failed attempt")
    for tail in output.orphan_tails:
        violations.append(f"tail object {tail} of a carried file is left over: no commit names it")
    for upload_key, upload_id in output.orphan_uploads:
        violations.append(f"incomplete multipart upload {store.storage.uri(upload_key)} (upload id {upload_id}) is "
                          "left over: no commit names it (the query's next commit aborts it; a bucket lifecycle "
                          "rule aborts it if the query never runs again)")
    keys: Counter = Counter()
    rows = 0
    recorded = recorded_arrow_schema(store.storage)
    for relative in sorted(visible):
        file_format = format_of(relative, fmt)
        try:
            table = read_table(store, relative, file_format)
        except DataError as exc:
            violations.append(f"unreadable file: {exc}")
            continue
        rows += table.num_rows
        if recorded is not None and file_format in TYPED_FORMATS:
            problem = file_schema_problem(relative, table.schema, recorded)
            if problem:
                violations.append(problem)
        if key:
            if key not in table.column_names:
                violations.append(f"file {relative} has no column '{key}'")
                continue
            keys.update(table.column(key).to_pylist())
    duplicates = {k: n for k, n in keys.items() if n > 1}
    for value, count in sorted(duplicates.items(), key=lambda item: str(item[0]))[:20]:
        violations.append(f"key {key}={value!r} appears {count} times")
    if len(duplicates) > 20:
        violations.append(f"... and {len(duplicates) - 20} more duplicate keys")
    return violations, {"files": len(visible), "rows": rows}


def spark_log_violations(storage: FileStorage, committed: set[str], expired: set[str],
                         visible: Mapping[str, int]) -> list[str]:
    """Spark's log (``_spark_metadata``, when present) names files that exist, and every live
    committed file that is not past the retention (local disk and S3, through the storage)."""
    log = SparkLog(storage)
    if not log.exists():
        return []
    try:
        named = {entry.path: log.relative(entry.path) for entry in log.view()}
    except DataError as exc:
        return [f"{METADATA_DIR} does not read: {exc}"]
    outside = sorted(uri for uri, relative in named.items() if relative is None)
    in_log = {relative for relative in named.values() if relative is not None}
    if outside:
        return [f"{METADATA_DIR} names {len(outside)} file(s) outside {storage.uri('')}, e.g. {outside[0]}: was the "
                "output moved or copied? Spark's log holds absolute paths"]
    violations = [f"{METADATA_DIR} names {name}, which is missing" for name in sorted(in_log - set(visible))]
    retention = recorded_retention(OutputLayout(storage).meta)
    now = time.time()
    for name in sorted(committed - in_log - expired):
        info = storage.info(name) if retention is not None else None
        if retention is not None and info is not None and now - info.modified_at > retention:
            continue  # left Spark's log at a compact batch, not yet folded out of sparklink's manifest
        violations.append(f"committed file {name} is not in {METADATA_DIR} (Spark's readers do not see it)")
    return violations
