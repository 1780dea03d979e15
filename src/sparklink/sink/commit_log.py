"""The sink's durable commit log (driver side).

One JSON file per committed batch: ``<dir>/<batchId>.json`` for micro-batches and
``<dir>/job-<jobId>.json`` for ``df.write`` jobs (plus ``<dir>/open/job-<jobId>`` while a
job's commit is under way). An entry is written atomically
(temporary file, fsync, rename) before any staged data becomes visible, and rewritten with
``state = "finished"`` once every committable is committed. Replaying an entry that is not
finished rolls the commit forward; a batch whose entry exists is never committed twice.

Beside the log, ``owner.json`` records the streaming query that owns the sink; a second
query is refused.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, TypeVar

from sparklink.errors import ConcurrentWriterError, MetadataError, naming_path
from sparklink.sink.writer import Committable

K = TypeVar("K")
V = TypeVar("V")
LOG_FORMAT_VERSION = 1
STATE_COMMITTING = "committing"
STATE_FINISHED = "finished"
_BATCH_FILE = re.compile(r"^(\d+)\.json$")
_JOB_FILE = re.compile(r"^job-([0-9a-zA-Z_-]+)\.json$")
OPEN_DIR = "open"  # markers of df.write job entries not finished yet


def read_json_file(path: Path, *, what: str) -> dict[str, Any] | None:
    """The JSON object in ``path``, None if the file does not exist. A file that is empty, cut
    short or not JSON raises MetadataError naming the file (driver side)."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    if not raw.strip():
        raise MetadataError(f"{what} {path} is empty")
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise MetadataError(f"{what} {path} is not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise MetadataError(f"{what} {path} is damaged (a JSON {type(data).__name__}, not an object)")
    return data


def read_unless_damaged(read: Callable[[K], V], key: K) -> V | None:
    """``read(key)``, or None when the file it reads is damaged (MetadataError). For readers
    that report damage on their own (``sparklink verify`` / ``inspect``), never for the sink."""
    try:
        return read(key)
    except MetadataError:
        return None


def write_json_atomically(path: Path, payload: dict[str, Any]) -> None:
    """Write ``payload`` to ``path`` so that readers see the old file or the new one, never half.
    An I/O error (a full disk) names ``path``."""
    with naming_path(path):
        _write_json_atomically(path, payload)


def _write_json_atomically(path: Path, payload: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(payload, handle, sort_keys=True)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def _fsync_dir(directory: Path) -> None:
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


@dataclass(kw_only=True)
class CommitLogEntry:
    """What the log says about one batch or job."""

    key: str
    batch_id: int | None
    state: str
    committables: list[Committable]
    created_at: float = field(default_factory=time.time)
    finished_at: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def finished(self) -> bool:
        return self.state == STATE_FINISHED

    def to_json(self) -> dict[str, Any]:
        return {
            "v": LOG_FORMAT_VERSION,
            "key": self.key,
            "batchId": self.batch_id,
            "state": self.state,
            "committables": self.committables,
            "createdAt": self.created_at,
            "finishedAt": self.finished_at,
            "extra": self.extra,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any], *, source: str) -> "CommitLogEntry":
        if data.get("v") != LOG_FORMAT_VERSION:
            raise MetadataError(f"{source}: commit log format version {data.get('v')!r} is not supported")
        try:
            entry = cls(
                key=str(data["key"]),
                batch_id=None if data["batchId"] is None else int(data["batchId"]),
                state=data["state"],
                committables=list(data["committables"]),
                created_at=float(data["createdAt"]),
                finished_at=data.get("finishedAt"),
                extra=dict(data.get("extra") or {}),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise MetadataError(f"commit log entry {source} is damaged (field {exc} missing or wrong)") from None
        if entry.state not in (STATE_COMMITTING, STATE_FINISHED) or not all(isinstance(c, dict) for c in entry.committables):
            raise MetadataError(f"commit log entry {source} is damaged (state {entry.state!r} or its committables)")
        return entry


class CommitLog:
    """A directory of commit entries. Only the driver writes it, one commit at a time."""

    def __init__(self, directory: str | os.PathLike[str]):
        self.directory = Path(directory)

    @staticmethod
    def key_for_batch(batch_id: int) -> str:
        return str(batch_id)

    @staticmethod
    def key_for_job(job_id: str) -> str:
        return f"job-{job_id}"

    def _path(self, key: str) -> Path:
        return self.directory / f"{key}.json"

    def path_of(self, key: str) -> Path:
        return self._path(key)

    def get(self, key: str) -> CommitLogEntry | None:
        """The entry for ``key``, None if there is none; MetadataError (naming the file) if the
        file is damaged or holds another batch's entry (a copy put in its place)."""
        path = self._path(key)
        data = read_json_file(path, what="commit log entry")
        if data is None:
            return None
        entry = CommitLogEntry.from_json(data, source=str(path))
        if entry.key != key:
            raise MetadataError(f"commit log entry {path} is damaged: it holds the entry of '{entry.key}'")
        return entry

    def latest_batch_entry(self) -> CommitLogEntry | None:
        """The entry of the latest micro-batch (one file read; driver side, every micro-batch)."""
        latest = self.latest_batch_id()
        return None if latest is None else self.get(self.key_for_batch(latest))

    def put(self, entry: CommitLogEntry) -> None:
        """Write ``entry`` atomically. A ``df.write`` job's entry is also marked open
        (``open/<key>``, made durable before the entry) until it is written finished, so that
        finding open job commits reads only those (:meth:`unfinished`)."""
        marker = self._open_marker(entry.key) if entry.batch_id is None else None
        if marker is not None and not entry.finished:
            marker.parent.mkdir(parents=True, exist_ok=True)
            with naming_path(marker):
                os.close(os.open(marker, os.O_WRONLY | os.O_CREAT, 0o644))
                _fsync_dir(marker.parent)
        write_json_atomically(self._path(entry.key), entry.to_json())
        if marker is not None and entry.finished:
            marker.unlink(missing_ok=True)

    def _open_marker(self, key: str) -> Path:
        return self.directory / OPEN_DIR / key

    def batch_ids(self) -> list[int]:
        """Logged micro-batch ids, ascending."""
        if not self.directory.is_dir():
            return []
        ids = [int(m.group(1)) for name in os.listdir(self.directory) if (m := _BATCH_FILE.match(name))]
        return sorted(ids)

    def job_keys(self) -> list[str]:
        if not self.directory.is_dir():
            return []
        return sorted(f"job-{m.group(1)}" for name in os.listdir(self.directory) if (m := _JOB_FILE.match(name)))

    def latest_batch_id(self) -> int | None:
        ids = self.batch_ids()
        return ids[-1] if ids else None

    def unfinished(self) -> list[CommitLogEntry]:
        """Entries written but not finished (a crash inside commit): to be rolled forward.

        Reads the micro-batch entries (at most ``Sink.commit_log_retention()`` are kept) and,
        of the ``df.write`` job entries, which are never purged, only those marked open: the
        cost does not grow with the number of jobs ever committed. A log written before the
        markers existed (no ``open/`` directory) is read whole."""
        keys = [self.key_for_batch(b) for b in self.batch_ids()]
        open_dir = self.directory / OPEN_DIR
        if open_dir.is_dir():
            keys += sorted(name for name in os.listdir(open_dir) if _JOB_FILE.match(f"{name}.json"))
        else:
            keys += self.job_keys()
        entries = (self.get(k) for k in keys)
        return [e for e in entries if e is not None and not e.finished]

    def purge_batches_before(self, batch_id: int) -> None:
        """Forget finished micro-batch entries older than ``batch_id`` (keeps the log bounded)."""
        for old in self.batch_ids():
            if old >= batch_id:
                break
            entry = self.get(self.key_for_batch(old))
            if entry is not None and entry.finished:
                self._path(self.key_for_batch(old)).unlink(missing_ok=True)


class OwnerLock:
    """Records which streaming query writes to a sink, so a second query is refused.

    The query id Spark stores in the checkpoint survives restarts, so a restarted query is
    the same owner; a query with another checkpoint has another id.
    """

    def __init__(self, path: str | os.PathLike[str], *, location_for_messages: str):
        self.path = Path(path)
        self.location = location_for_messages

    def owner(self) -> str | None:
        """The owning query's id, None if nobody claimed the output; MetadataError if the claim
        does not parse (it then cannot tell which query owns the output)."""
        try:
            data = read_json_file(self.path, what="owner claim")
            if data is None:
                return None
            owner = data.get("queryId")
            if not isinstance(owner, str) or not owner:
                raise MetadataError(f"owner claim {self.path} is damaged (no 'queryId')")
        except MetadataError as exc:
            raise MetadataError(f"{exc}: it cannot tell which streaming query owns {self.location}. If no other "
                                f"query writes there, delete {self.path}; the next start claims the output "
                                "again") from None
        return owner

    def claim(self, query_id: str) -> None:
        """Become the owner, or raise ConcurrentWriterError if another query is.

        The claim is a complete file or nothing, even if the driver is killed while claiming:
        the record is written to a temporary file first and hard-linked to its name, which
        fails if another query claimed first.
        """
        current = self.owner()
        if current is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".tmp", dir=self.path.parent)
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as handle:
                    json.dump({"queryId": query_id, "claimedAt": time.time()}, handle)
                    handle.flush()
                    os.fsync(handle.fileno())
                os.link(tmp, self.path)
            except FileExistsError:
                current = self.owner()
            else:
                return
            finally:
                Path(tmp).unlink(missing_ok=True)
        if current != query_id:
            raise ConcurrentWriterError(
                f"sink output {self.location} belongs to streaming query {current}; query {query_id} "
                f"may not write to it. Use another path, or remove {self.path} if that query is gone for good."
            )
