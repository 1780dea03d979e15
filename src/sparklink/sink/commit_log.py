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
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, TypeVar

from sparklink.errors import ConcurrentWriterError, MetadataError
from sparklink.sink.writer import Committable
from sparklink.storage.directory import StorageDirectory, StorageFile

K = TypeVar("K")
V = TypeVar("V")
LOG_FORMAT_VERSION = 1
STATE_COMMITTING = "committing"
STATE_FINISHED = "finished"
_BATCH_FILE = re.compile(r"^(\d+)\.json$")
_JOB_FILE = re.compile(r"^job-([0-9a-zA-Z_-]+)\.json$")
OPEN_DIR = "open"  # markers of df.write job entries not finished yet
MARKERS_KEPT = "_markers"  # in open/: this log keeps a marker for every open job entry (written once)


def read_json_file(path: Path, *, what: str) -> dict[str, Any] | None:
    """The JSON object in ``path``, None if the file does not exist. A file that is empty, cut
    short or not JSON raises MetadataError naming the file (driver side)."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    return parse_json_object(raw, source=str(path), what=what)


def parse_json_object(raw: bytes, *, source: str, what: str) -> dict[str, Any]:
    """The JSON object in ``raw`` (the content of ``source``); MetadataError naming ``source``
    if it is empty, cut short or not a JSON object."""
    if not raw.strip():
        raise MetadataError(f"{what} {source} is empty")
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise MetadataError(f"{what} {source} is not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise MetadataError(f"{what} {source} is damaged (a JSON {type(data).__name__}, not an object)")
    return data


def read_json_object(directory: StorageDirectory, name: str, *, what: str) -> tuple[dict[str, Any], str] | None:
    """The JSON object ``name`` of ``directory`` and the version it was read at; None if it
    does not exist (local disk or S3; driver side)."""
    stored = directory.read(name)
    if stored is None:
        return None
    return parse_json_object(stored.data, source=directory.uri(name), what=what), stored.version


def json_bytes(payload: dict[str, Any]) -> bytes:
    return json.dumps(payload, sort_keys=True).encode("utf-8")


def read_unless_damaged(read: Callable[[K], V], key: K) -> V | None:
    """``read(key)``, or None when the file it reads is damaged (MetadataError). For readers
    that report damage on their own (``sparklink verify`` / ``inspect``), never for the sink."""
    try:
        return read(key)
    except MetadataError:
        return None


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
    """A directory of commit entries (local disk or S3). Only the driver writes it, one commit
    at a time. A new entry is created only if none exists (S3: ``If-None-Match: *``); an entry
    this object read or created is rewritten only if it did not change since (S3: ``If-Match``
    on its ETag), else ConcurrentWriterError: another writer touched the log."""

    def __init__(self, directory: StorageDirectory):
        self.dir = directory
        self._versions: dict[str, str] = {}

    @staticmethod
    def key_for_batch(batch_id: int) -> str:
        return str(batch_id)

    @staticmethod
    def key_for_job(job_id: str) -> str:
        return f"job-{job_id}"

    @staticmethod
    def _name(key: str) -> str:
        return f"{key}.json"

    def path_of(self, key: str) -> str:
        """The entry's path (local disk) or URI (object store), for messages."""
        return self.dir.uri(self._name(key))

    def get(self, key: str) -> CommitLogEntry | None:
        """The entry for ``key``, None if there is none; MetadataError (naming the file) if the
        file is damaged or holds another batch's entry (a copy put in its place)."""
        found = read_json_object(self.dir, self._name(key), what="commit log entry")
        if found is None:
            return None
        data, version = found
        source = self.dir.uri(self._name(key))
        entry = CommitLogEntry.from_json(data, source=source)
        if entry.key != key:
            raise MetadataError(f"commit log entry {source} is damaged: it holds the entry of '{entry.key}'")
        self._versions[key] = version
        return entry

    def latest_batch_entry(self) -> CommitLogEntry | None:
        """The entry of the latest micro-batch (one file read; driver side, every micro-batch)."""
        latest = self.latest_batch_id()
        return None if latest is None else self.get(self.key_for_batch(latest))

    def create(self, entry: CommitLogEntry) -> None:
        """Write a new entry; ConcurrentWriterError if one appeared since :meth:`get` said none."""
        if entry.batch_id is None and not entry.finished:
            self.dir.put(self._open_marker(entry.key), b"")
        version = self.dir.create_if_absent(self._name(entry.key), json_bytes(entry.to_json()))
        if version is None:
            raise ConcurrentWriterError(f"commit log entry {self.dir.uri(self._name(entry.key))} was written by "
                                        "another writer while this query committed it")
        self._versions[entry.key] = version

    def put(self, entry: CommitLogEntry) -> None:
        """Write ``entry`` whole: conditionally on the version this log last saw of it, or
        unconditionally if it never saw one (a rewrite of a damaged or missing entry). A
        ``df.write`` job's entry is also marked open (``open/<key>``, made durable before the
        entry) until it is written finished, so that finding open job commits reads only those
        (:meth:`unfinished`)."""
        marked = entry.batch_id is None
        if marked and not entry.finished:
            self.dir.put(self._open_marker(entry.key), b"")
        name, data = self._name(entry.key), json_bytes(entry.to_json())
        expected = self._versions.get(entry.key)
        if expected is None:
            self._versions[entry.key] = self.dir.put(name, data)
        else:
            version = self.dir.replace(name, data, expected_version=expected)
            if version is None:
                raise ConcurrentWriterError(f"commit log entry {self.dir.uri(name)} was changed by another writer "
                                            "since this query read it")
            self._versions[entry.key] = version
        if marked and entry.finished:
            self.dir.delete(self._open_marker(entry.key))

    @staticmethod
    def _open_marker(key: str) -> str:
        return f"{OPEN_DIR}/{key}"

    def batch_ids(self) -> list[int]:
        """Logged micro-batch ids, ascending."""
        return sorted(int(m.group(1)) for name in self.dir.names() if (m := _BATCH_FILE.match(name)))

    def job_keys(self) -> list[str]:
        return sorted(f"job-{m.group(1)}" for name in self.dir.names() if (m := _JOB_FILE.match(name)))

    def latest_batch_id(self) -> int | None:
        ids = self.batch_ids()
        return ids[-1] if ids else None

    def unfinished(self) -> list[CommitLogEntry]:
        """Entries written but not finished (a crash inside commit): to be rolled forward.

        Reads the micro-batch entries (at most ``Sink.commit_log_retention()`` are kept) and,
        of the ``df.write`` job entries, which are never purged, only those marked open: the
        cost does not grow with the number of jobs ever committed. A log that does not say it
        keeps markers (``open/_markers``: written before markers existed) is read whole once,
        then says so."""
        keys = [self.key_for_batch(b) for b in self.batch_ids()]
        markers = self.dir.storage.names(self.dir.key(OPEN_DIR))
        if MARKERS_KEPT in markers:
            keys += sorted(name for name in markers if _JOB_FILE.match(f"{name}.json"))
        else:
            keys += self.job_keys()
            self.dir.create_if_absent(f"{OPEN_DIR}/{MARKERS_KEPT}", b"")
        entries = (self.get(k) for k in keys)
        return [e for e in entries if e is not None and not e.finished]

    def purge_batches_before(self, batch_id: int) -> None:
        """Forget finished micro-batch entries older than ``batch_id`` (keeps the log bounded)."""
        for old in self.batch_ids():
            if old >= batch_id:
                break
            key = self.key_for_batch(old)
            entry = self.get(key)
            if entry is not None and entry.finished:
                self.dir.delete(self._name(key))
                self._versions.pop(key, None)


class OwnerLock:
    """Records which streaming query writes to a sink, so a second query is refused.

    The query id Spark stores in the checkpoint survives restarts, so a restarted query is
    the same owner; a query with another checkpoint has another id. The claim is an object
    on any storage (local disk or S3).
    """

    def __init__(self, claim: StorageFile, *, location_for_messages: str):
        self.dir, self.name = claim.directory, claim.name
        self.path = claim.uri()
        self.location = location_for_messages

    def owner(self) -> str | None:
        """The owning query's id, None if nobody claimed the output; MetadataError if the claim
        does not parse (it then cannot tell which query owns the output)."""
        try:
            found = read_json_object(self.dir, self.name, what="owner claim")
            if found is None:
                return None
            owner = found[0].get("queryId")
            if not isinstance(owner, str) or not owner:
                raise MetadataError(f"owner claim {self.path} is damaged (no 'queryId')")
        except MetadataError as exc:
            raise MetadataError(f"{exc}: it cannot tell which streaming query owns {self.location}. If no other "
                                f"query writes there, delete {self.path}; the next start claims the output "
                                "again") from None
        return owner

    def claim(self, query_id: str) -> None:
        """Become the owner, or raise ConcurrentWriterError if another query is.

        The claim is a complete file or nothing, even if the driver is killed while claiming,
        and it is created only if no claim exists (local disk: a temporary file hard-linked to
        its name; S3: ``If-None-Match: *``), so of two queries claiming at once one wins.
        """
        current = self.owner()
        if current is None:
            claim = json.dumps({"queryId": query_id, "claimedAt": time.time()}).encode("utf-8")
            if self.dir.create_if_absent(self.name, claim) is not None:
                return
            current = self.owner()
        if current != query_id:
            raise ConcurrentWriterError(
                f"sink output {self.location} belongs to streaming query {current}; query {query_id} "
                f"may not write to it. Use another path, or remove {self.path} if that query is gone for good."
            )


def owner_lock_at(claim: StorageFile, *, location_for_messages: str) -> OwnerLock:
    """The owner claim at ``claim`` (an object on any storage)."""
    return OwnerLock(claim, location_for_messages=location_for_messages)
