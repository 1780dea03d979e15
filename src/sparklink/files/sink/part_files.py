"""Part files: their names and their lifecycle records (in-progress, pending, finished).

Layout (ARCHITECTURE.md, "The file sink's invariants")::

    <bucket>/.<prefix>-<writerUid>-<n><suffix>.inprogress.<tag>    in-progress or pending (hidden)
    <bucket>/<prefix>-<writerUid>-<n><suffix>                       finished (visible, never modified)

``tag`` starts with ``s`` for files of streaming queries and ``j<jobId>`` for ``df.write``
jobs, so the orphan sweep of a streaming query never touches a batch job's staged files.

A :class:`PartFile` describes one file written by one task; it is the sink's committable
(executor -> driver, JSON) and, for carried in-progress and held pending files, a record of
the sink's committed state. Pure functions and values: usable on driver and executors.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from sparklink.errors import CommitError

PART_FILE_VERSION = 1
IN_PROGRESS = "inprogress"
PENDING = "pending"
STREAM_TAG_PREFIX = "s"
COMPACTION_TAG = STREAM_TAG_PREFIX + "compact"  # the temporary file of a compaction (a commit's or a finish's)
JOB_TAG_PREFIX = "j"
JOB_UID_PREFIX = "j"  # writer uids of df.write tasks: j + a digest of the job id + random
_IN_PROGRESS_NAME = re.compile(r"^\.(?P<final>.+)\.inprogress\.(?P<tag>[0-9A-Za-z_-]+)$")


def new_writer_uid() -> str:
    """A fresh writer uid (one per task attempt, as Flink's per-subtask uid)."""
    return uuid.uuid4().hex[:16]


def job_writer_uid(job_id: str) -> str:
    """A writer uid for a task of ``df.write`` job ``job_id`` (16 characters): a failed job
    finds its own tasks' files by it, and a streaming query's sweep never touches them."""
    return job_uid_prefix(job_id) + uuid.uuid4().hex[:8]


def job_uid_prefix(job_id: str) -> str:
    return JOB_UID_PREFIX + hashlib.sha1(job_id.encode("utf-8"), usedforsecurity=False).hexdigest()[:7]


def _part_name(part_prefix: str) -> re.Pattern[str]:
    # writer uids of streams (hex), of jobs (j...), of commits' compactions (c<batch>) and of
    # sparklink.files.finish's compactions and copies (f<batch>)
    return re.compile(rf"^{re.escape(part_prefix)}-(?P<uid>[0-9a-f]{{16}}|{JOB_UID_PREFIX}[0-9a-f]{{15}}|[cf]\d{{8}})-\d+")


def _uid_and_tag(pattern: re.Pattern[str], name: str) -> tuple[str, str | None] | None:
    parsed = parse_in_progress(name)
    final, tag = parsed if parsed is not None else (name, None)
    match = pattern.match(final)
    return (match.group("uid"), tag) if match else None


def stream_part_file(part_prefix: str) -> Callable[[str], bool]:
    """Whether a part-file name (hidden or final) is a streaming query's (its sweep's scope)."""
    pattern = _part_name(part_prefix)

    def ours(name: str) -> bool:
        found = _uid_and_tag(pattern, name)
        return found is not None and not found[0].startswith(JOB_UID_PREFIX) and \
            (found[1] is None or found[1].startswith(STREAM_TAG_PREFIX))
    return ours


def job_part_file(part_prefix: str, job_id: str) -> Callable[[str], bool]:
    """Whether a part-file name (hidden or final) is one of ``df.write`` job ``job_id``'s."""
    pattern, prefix = _part_name(part_prefix), job_uid_prefix(job_id)

    def ours(name: str) -> bool:
        found = _uid_and_tag(pattern, name)
        return found is not None and found[0].startswith(prefix)
    return ours


def finished_name(prefix: str, writer_uid: str, counter: int, suffix: str) -> str:
    return f"{prefix}-{writer_uid}-{counter}{suffix}"


def in_progress_name(final_name: str, tag: str) -> str:
    return f".{final_name}.inprogress.{tag}"


def stream_tag() -> str:
    return STREAM_TAG_PREFIX + uuid.uuid4().hex[:12]


def job_tag(job_id: str) -> str:
    return JOB_TAG_PREFIX + re.sub(r"[^0-9A-Za-z]", "", job_id)[:16]


def parse_in_progress(name: str) -> tuple[str, str] | None:
    """``(finished name, tag)`` of a hidden part file name, None for any other name."""
    match = _IN_PROGRESS_NAME.match(name)
    return (match.group("final"), match.group("tag")) if match else None


def relative(bucket: str, name: str) -> str:
    return f"{bucket}/{name}" if bucket else name


@dataclass(kw_only=True)
class PartFile:
    """One part file written by one task attempt (a committable and a state record).

    ``path`` / ``final`` are relative to the sink's base path. ``length`` is the byte length
    that is valid (the file is truncated to it on recovery). ``base_path`` / ``base_length``
    name the carried in-progress file this one continues (row formats, default rolling
    policy) and its committed length; ``in_place`` says the writer appended to that same
    file rather than to a copy of it.
    """

    bucket: str
    partition: int
    path: str
    final: str
    state: str
    length: int
    rows: int
    created_at: float
    last_write_at: float
    base_path: str | None = None
    base_length: int = 0
    in_place: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.state not in (IN_PROGRESS, PENDING):
            raise CommitError(f"part file {self.path}: unknown state '{self.state}'")

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["v"] = PART_FILE_VERSION
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "PartFile":
        if data.get("v") != PART_FILE_VERSION:
            raise CommitError(f"part file record version {data.get('v')!r} is not supported: {data}")
        values = {k: v for k, v in data.items() if k != "v"}
        return cls(**values)
