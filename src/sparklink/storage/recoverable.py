"""The part-file seam: files written by tasks and made visible by a commit (Flink's
``RecoverableWriter``), next to :class:`~sparklink.storage.base.FileStorage` (metadata objects).

A part file has two names: its *hidden* key (``record.path``), where it is written while in
progress or pending and which readers skip, and its *final* key (``record.final``), where a
commit makes it visible, whole, once. The seam's operations, each with one implementation per
store (:mod:`sparklink.storage.local_recoverable`, :mod:`sparklink.storage.s3_recoverable`,
:mod:`sparklink.storage.memory`):

* executors: :meth:`RecoverableWriter.open` a new file, :meth:`RecoverableWriter.resume` a
  carried file at its committed length; write to the returned :class:`PartStream`; then
  :meth:`PartStream.close` it (pending: its bytes are durable, a commit can publish it) or
  :meth:`PartStream.persist` it (carried to the next micro-batch: durable at this length, and it
  goes on in a later task), or :meth:`PartStream.discard` it (a failing task);
* driver, inside a commit (every operation idempotent, as the commit may be replayed after a
  crash): :meth:`RecoverableWriter.commit` (visible at the final key),
  :meth:`RecoverableWriter.commit_hidden` (readable at the hidden key, for compaction),
  :meth:`RecoverableWriter.cut_back` (a carried file back to its committed length),
  :meth:`RecoverableWriter.clean_after_commit`;
* driver, outside a commit: :meth:`RecoverableWriter.abort` (a batch that is discarded) and
  :meth:`RecoverableWriter.sweep` (whatever no commit names: failed attempts, a killed driver).

A record is the sink's :class:`~sparklink.files.sink.part_files.PartFile`; the seam reads and
writes the fields of :class:`PartRecord` only and keeps its own durable state (S3: the upload,
its parts, the tail object) in ``record.extra``, which travels in committables and the state.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Protocol

from sparklink.storage.base import FileStorage

COPY_CHUNK = 8 * 1024 * 1024  # bytes a copy between files moves at a time (when the store has no copy of its own)


class PartRecord(Protocol):
    """What the seam needs of a part file's record (the sink's ``PartFile`` is one)."""

    path: str          # the hidden key: where the file is written until a commit publishes it
    final: str         # the final key: where a commit makes it visible
    length: int        # the bytes that are valid (a commit publishes exactly these)
    base_path: str | None   # a continuation: the carried file it continues ...
    base_length: int        # ... and that file's committed length
    in_place: bool          # ... appended to in place (else a copy of it was made)
    extra: dict[str, Any]   # the store's own durable state of the file


@dataclass(frozen=True, kw_only=True)
class Staging:
    """What a store keeps for one part file outside a plain listing (S3: its multipart upload,
    by id, its size so far, and its tail object): for ``inspect`` / ``verify``."""

    id: str
    size: int
    auxiliary: frozenset[str] = frozenset()


class PartStream(ABC):
    """One open part file (executor side): bytes go in with :meth:`write` (row formats) or
    through :meth:`bulk_target` (a bulk writer's output); then exactly one of
    :meth:`close`, :meth:`persist`, :meth:`discard`."""

    @abstractmethod
    def write(self, data: bytes | memoryview) -> None: ...

    def write_from(self, source: Any, length: int) -> int:
        """Append the next ``length`` bytes of ``source`` (a readable binary file, from its
        position, which ends past them); returns the bytes appended: fewer when ``source`` ended
        first. Carried files continued by a retry, and compaction's and ``finish``'s copies."""
        copied = 0
        while copied < length:
            chunk = source.read(min(length - copied, COPY_CHUNK))
            if not chunk:
                break
            self.write(chunk)
            copied += len(chunk)
        return copied

    @abstractmethod
    def tell(self) -> int:
        """Bytes the file holds so far."""

    @abstractmethod
    def bulk_target(self) -> Path | BinaryIO:
        """What a bulk writer (Parquet, ORC, Avro) writes to: a local path (pyarrow's native
        file, synced at close) or a file object; the bulk writer closes it."""

    @abstractmethod
    def close(self) -> None:
        """The file is pending: every byte durable, ``record.length`` its size, its store state in
        ``record.extra``. After a bulk writer closed :meth:`bulk_target`, this only records."""

    @abstractmethod
    def persist(self, owner: str) -> None:
        """Carry the file to the next micro-batch: durable at ``record.length``; ``owner`` (the
        writer's uid) names what this attempt stored for it."""

    @abstractmethod
    def discard(self) -> None:
        """Stop writing and release handles; what was written is left to :meth:`RecoverableWriter.abort`."""


class RecoverableWriter(ABC):
    """The part files of one output on one store (built where it is used; holds live clients)."""

    storage: FileStorage
    seals_in_place: bool = False  # committing a carried file fixes its content even while a writer holds it

    # ------------------------------------------------------------------ executors

    @abstractmethod
    def open(self, record: PartRecord, *, direct: bool = False) -> PartStream:
        """A new, empty part file at ``record.path`` (visible at ``record.final`` once committed).
        ``direct``: nothing reads the file before its commit (a compaction's output), so a store
        whose files stay invisible until committed (S3) writes it at its final key at once."""

    @abstractmethod
    def resumes_in_place(self, attempt: int) -> bool:
        """Whether task attempt ``attempt`` continues a carried file in place (else into a copy
        of its committed bytes under a new name of its own)."""

    @abstractmethod
    def resume(self, record: PartRecord, base: PartRecord, *, attempt: int) -> PartStream:
        """Continue the carried file ``base`` at its committed length as ``record`` (in place:
        ``record.path == base.path``; else a copy at ``record.path``)."""

    # ------------------------------------------------------------------ driver, inside a commit

    @abstractmethod
    def commit(self, record: PartRecord) -> bool:
        """Publish the pending file at ``record.final`` with exactly ``record.length`` bytes;
        True if this call did it, False if an earlier (crashed) commit did. A final key that
        holds another file is never overwritten (CommitError)."""

    @abstractmethod
    def commit_hidden(self, record: PartRecord) -> None:
        """Make the pending file readable at its hidden key with ``record.length`` bytes (a file
        held for compaction, read by :meth:`FileStorage.open_input`); idempotent."""

    @abstractmethod
    def cut_back(self, record: PartRecord) -> None:
        """A carried file the commit keeps open: back to ``record.length`` if an attempt no
        commit named wrote past it; CommitError if it is gone or shorter."""

    @abstractmethod
    def is_committed(self, record: PartRecord) -> bool:
        """Whether an earlier commit published ``record`` at its final key."""

    @abstractmethod
    def clean_after_commit(self, finished: Iterable[PartRecord], carried: Iterable[PartRecord]) -> None:
        """After a commit finished ``finished`` and carries ``carried``: drop what the store kept
        only for files that are now complete or that a continuation superseded."""

    # ------------------------------------------------------------------ driver, outside a commit

    @abstractmethod
    def abort(self, record: PartRecord) -> None:
        """Drop a part file no commit will name (a discarded batch, a failed job): a new file is
        removed, a continuation leaves its carried file as its last commit recorded."""

    @abstractmethod
    def sweep(self, *, ours: Callable[[str], bool], keep: Iterable[PartRecord]) -> list[str]:
        """Remove every in-progress file (and everything stored for one) whose name ``ours``
        accepts and that no record in ``keep`` (the last committed state's open files) names.
        Never inside a commit whose tasks' files are not named yet. Returns the removed keys."""

    @abstractmethod
    def sweep_finished(self, finished: Iterable[PartRecord]) -> list[str]:
        """Remove what task attempts stored for the carried files ``finished`` (the last commit
        published) beyond what that commit named. Returns the removed keys."""

    # ------------------------------------------------------------------ inspection (driver, read-only)

    def staging_of(self, extra: Mapping[str, object] | None) -> Staging | None:
        """The staging a record's ``extra`` names (None: the store has none, or it does not read)."""
        return None

    def unlisted(self) -> Iterator[tuple[str, str]]:
        """``(key, staging id)`` of every file being written that a listing of the storage does
        not show (S3: incomplete multipart uploads); nothing where every file is listed."""
        return iter(())

    def unlisted_size(self, key: str, staging_id: str) -> int:
        """Bytes staged so far for an unlisted file."""
        raise NotImplementedError(f"{type(self).__name__} has no unlisted files")

    def auxiliary_owner(self, name: str) -> str | None:
        """The hidden part-file name an auxiliary object ``name`` belongs to (S3: a tail object);
        None for any other name."""
        return None
