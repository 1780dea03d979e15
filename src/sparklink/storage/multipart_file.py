"""An in-progress part file on S3: a multipart upload written as a file (executor side).

Flink's S3 recoverable writer on the storage seam. :class:`MultipartFile` is a binary,
write-only file object (what pyarrow's writers and the row encoders write to): bytes are
buffered and, whenever ``part_size`` of them are buffered, uploaded at once as the next part,
so memory stays bounded by one part and the upload progresses with the data. Nothing is
visible to an S3 reader (list or get) until the upload is completed.

* :meth:`MultipartFile.close` uploads the rest as the last part and returns a
  :class:`MultipartRecord` with every part: the file is *pending*; the committer completes it
  with :meth:`S3Storage.complete_upload`, idempotently.
* :meth:`MultipartFile.persist` is for a file carried to the next micro-batch (row formats,
  the ``default`` rolling policy): parts hold at least 5 MiB (S3's minimum for every part but
  the last), so the tail smaller than ``part_size`` cannot be a part yet. It is written as a
  small hidden object of its own (``<key>.tail-<n>``, as Flink's "incomplete part" object) and
  named in the record; :meth:`MultipartFile.resume` reads it back into the buffer and
  continues the same upload. A resumed tail object is superseded (the committer deletes tail
  objects no commit names).

Several attempts of one task may resume the same file (Spark's retries, a replay after a
crash). Each takes its own part numbers, so that no attempt overwrites a part another one
uploaded: attempt ``slot`` of ``slots`` numbers its parts ``last + 1 + slot``, then every
``slots``-th number after it (part numbers of an upload need only ascend, not be contiguous).
The commit names the winning attempt's parts; parts no commit names are dropped by S3 when the
upload is completed.

Runs once per part file in a write task; one instance holds one live S3 client (never pickled).
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from typing import Any

from sparklink.errors import StorageError
from sparklink.storage.s3 import MAX_PARTS, MIN_PART_SIZE, S3Storage, UploadedPart

DEFAULT_PART_SIZE = 8 * 1024 * 1024
RECORD_VERSION = 1


@dataclass(kw_only=True)
class MultipartRecord:
    """The durable state of one multipart part file (JSON, travels in committables and state).

    ``parts`` are uploaded; ``tail_key`` (carried files only) names the object holding the
    ``tail_size`` bytes written after them. ``size`` is the file's whole length so far.
    """

    key: str
    upload_id: str
    parts: list[UploadedPart] = field(default_factory=list)
    tail_key: str | None = None
    tail_size: int = 0

    @property
    def size(self) -> int:
        return sum(p.size for p in self.parts) + self.tail_size

    def to_json(self) -> dict[str, Any]:
        return {"v": RECORD_VERSION, "key": self.key, "uploadId": self.upload_id,
                "parts": [p.to_json() for p in self.parts], "tailKey": self.tail_key, "tailSize": self.tail_size}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "MultipartRecord":
        if data.get("v") != RECORD_VERSION:
            raise StorageError(f"multipart file record version {data.get('v')!r} is not supported: {data}")
        return cls(key=data["key"], upload_id=data["uploadId"], parts=[UploadedPart.from_json(p) for p in data["parts"]],
                   tail_key=data.get("tailKey"), tail_size=int(data.get("tailSize") or 0))


class MultipartFile(io.RawIOBase):
    """Write-only file whose bytes go up as the parts of one multipart upload."""

    def __init__(self, storage: S3Storage, record: MultipartRecord, *, part_size: int = DEFAULT_PART_SIZE,
                 buffered: bytes = b"", slot: int = 0, slots: int = 1):
        if part_size < MIN_PART_SIZE:
            raise StorageError(f"part size {part_size} is below S3's minimum of {MIN_PART_SIZE} bytes (5 MiB)")
        super().__init__()
        self.storage = storage
        self.record = record
        self.part_size = part_size
        self._buffer = bytearray(buffered)
        self._position = sum(p.size for p in record.parts) + len(buffered)
        self._next_number = (record.parts[-1].number if record.parts else 0) + 1 + slot
        self._number_step = slots

    @classmethod
    def create(cls, storage: S3Storage, key: str, *, part_size: int = DEFAULT_PART_SIZE) -> "MultipartFile":
        """A new, empty part file: starts the multipart upload of ``key``."""
        return cls(storage, MultipartRecord(key=key, upload_id=storage.start_upload(key)), part_size=part_size)

    @classmethod
    def resume(cls, storage: S3Storage, record: MultipartRecord, *, part_size: int = DEFAULT_PART_SIZE,
               slot: int = 0, slots: int = 1) -> "MultipartFile":
        """Continue a file :meth:`persist` recorded: its parts stay, its tail is read back; new
        parts take the numbers of ``slot`` of ``slots`` (see the module docstring)."""
        if not 0 <= slot < slots:
            raise StorageError(f"part file {storage.uri(record.key)}: attempt slot {slot} is outside 0..{slots - 1} "
                               f"(at most {slots} attempts may continue one carried file)")
        tail = b""
        if record.tail_key is not None:
            stored = storage.read(record.tail_key)
            if stored is None or len(stored.data) != record.tail_size:
                found = "missing" if stored is None else f"{len(stored.data)} bytes"
                raise StorageError(f"tail object {storage.uri(record.tail_key)} of part file {storage.uri(record.key)} "
                                   f"is {found}, not the {record.tail_size} bytes the last commit recorded")
            tail = stored.data
        parts = list(record.parts)
        return cls(storage, MultipartRecord(key=record.key, upload_id=record.upload_id, parts=parts),
                   part_size=part_size, buffered=tail, slot=slot, slots=slots)

    def __del__(self) -> None:
        """Garbage collection never uploads nor aborts anything (IOBase would close the file)."""

    # ------------------------------------------------------------------ file object protocol

    def writable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._position

    def write(self, data: Any) -> int:
        if self.closed:
            raise ValueError(f"write to closed part file {self.storage.uri(self.record.key)}")
        view = memoryview(data).cast("B")
        self._buffer += view
        self._position += len(view)
        while len(self._buffer) >= self.part_size:
            self._upload(bytes(self._buffer[:self.part_size]))
            del self._buffer[:self.part_size]
        return len(view)

    def _upload(self, data: bytes) -> None:
        number = self._next_number
        self._next_number += self._number_step
        if number > MAX_PARTS:
            raise StorageError(f"part file {self.storage.uri(self.record.key)} needs more than {MAX_PARTS} parts of "
                               f"{self.part_size} bytes: raise the part size or roll files smaller")
        self.record.parts.append(self.storage.upload_part(self.record.key, self.record.upload_id, number, data))

    # ------------------------------------------------------------------ lifecycle

    def persist(self, tail_key: str) -> MultipartRecord:
        """The record of what was written so far, for carrying the file to the next batch: full
        parts are uploaded, the tail is written to ``tail_key``. The file stays open."""
        tail = bytes(self._buffer)
        self.storage.put(tail_key, tail)
        return MultipartRecord(key=self.record.key, upload_id=self.record.upload_id, parts=list(self.record.parts),
                               tail_key=tail_key, tail_size=len(tail))

    def close(self) -> None:
        """Upload the rest as the last part (the file becomes pending). A file with no byte at
        all gets one empty part, so its upload can be completed into an empty object."""
        if self.closed:
            return
        if self._buffer or not self.record.parts:
            self._upload(bytes(self._buffer))
            self._buffer.clear()
        super().close()

    def pending(self) -> MultipartRecord:
        """The record of the closed file: every part uploaded, the upload not completed."""
        if not self.closed:
            raise StorageError(f"part file {self.storage.uri(self.record.key)} is still open")
        return MultipartRecord(key=self.record.key, upload_id=self.record.upload_id, parts=list(self.record.parts))

    def detach(self) -> None:
        """Stop writing, uploading and aborting nothing: the file was :meth:`persist`-ed and goes on
        in a later task (or the upload belongs to a carried file this attempt only continued)."""
        super().close()

    def abandon(self) -> None:
        """Abort the upload (a failed task's file; nothing of it is ever visible)."""
        super().close()
        self.storage.abort_upload(self.record.key, self.record.upload_id)
