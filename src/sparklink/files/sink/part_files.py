"""Part files: their names and their lifecycle records (in-progress, pending, finished).

Layout (DESIGN.md section 4)::

    <bucket>/.<prefix>-<writerUid>-<n><suffix>.inprogress.<tag>    in-progress or pending (hidden)
    <bucket>/<prefix>-<writerUid>-<n><suffix>                       finished (visible, never modified)

``tag`` starts with ``s`` for files of streaming queries and ``j<jobId>`` for ``df.write``
jobs, so the orphan sweep of a streaming query never touches a batch job's staged files.

A :class:`PartFile` describes one file written by one task; it is the sink's committable
(executor -> driver, JSON) and, for carried in-progress and held pending files, a record of
the sink's committed state. Pure functions and values: usable on driver and executors.
"""

from __future__ import annotations

import os
import re
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from sparklink.errors import CommitError
from sparklink.storage.local import fsync_dir  # noqa: F401 - re-exported for the sink's modules

PART_FILE_VERSION = 1
IN_PROGRESS = "inprogress"
PENDING = "pending"
STREAM_TAG_PREFIX = "s"
COMPACTION_TAG = STREAM_TAG_PREFIX + "compact"  # the temporary file of a compaction (a commit's or a finish's)
JOB_TAG_PREFIX = "j"
_IN_PROGRESS_NAME = re.compile(r"^\.(?P<final>.+)\.inprogress\.(?P<tag>[0-9A-Za-z_-]+)$")


def new_writer_uid() -> str:
    """A fresh writer uid (one per task attempt, as Flink's per-subtask uid)."""
    return uuid.uuid4().hex[:16]


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


def bucket_dir(root: Path, bucket: str) -> Path:
    return root / bucket if bucket else root


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


def truncate_to(path: Path, length: int) -> None:
    """Cut ``path`` back to ``length`` bytes if it is longer (recovery of in-progress files)."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return
    if size > length:
        with open(path, "r+b") as handle:
            handle.truncate(length)
            handle.flush()
            os.fsync(handle.fileno())
    elif size < length:
        raise CommitError(f"in-progress file {path} holds {size} bytes, fewer than the {length} the last "
                          "commit recorded: it was modified outside the sink")

