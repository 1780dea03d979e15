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

Parts go up while the task keeps encoding: a full part's buffer is handed, as it is (never
copied), to a background thread, and the writer goes on filling a new one; at most
``uploads_in_flight`` parts (:data:`UPLOADS_IN_FLIGHT` unless told) are on their way, a writer
that gets ahead waits for the oldest. Memory is bounded by ``(uploads_in_flight + 1) *
part_size`` per open file: 24 MiB at the default 8 MiB parts (at :meth:`close` the last part
goes up beside those in flight, as no buffer is filled any more). Every lifecycle step
(:meth:`persist`, :meth:`close`) waits for the parts in flight; a part that failed to
upload is raised at the next write or step (the store's error, naming the file), so a pending
file never lacks a part. With ``uploads_in_flight=0`` each part is uploaded before ``write``
returns.

Runs once per part file in a write task; one instance holds one live S3 client (never pickled).
"""

from __future__ import annotations

import io
import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, BinaryIO, cast

from sparklink.errors import StorageError
from sparklink.storage.base import NewFile
from sparklink.storage.s3 import MAX_PARTS, MIN_PART_SIZE, S3Storage, UploadedPart
from sparklink.storage.s3_config import DEFAULT_PART_SIZE

UPLOADS_IN_FLIGHT = 2  # parts uploading in the background per open file while the task writes the next
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
                 buffered: bytes = b"", slot: int = 0, slots: int = 1, uploads_in_flight: int = UPLOADS_IN_FLIGHT):
        if part_size < MIN_PART_SIZE:
            raise StorageError(f"part size {part_size} is below S3's minimum of {MIN_PART_SIZE} bytes (5 MiB)")
        if uploads_in_flight < 0:
            raise StorageError(f"uploads in flight must be 0 or more, not {uploads_in_flight}")
        super().__init__()
        self.storage = storage
        self.record = record
        self.part_size = part_size
        self._buffer = bytearray(buffered)
        self._position = sum(p.size for p in record.parts) + len(buffered)
        self._next_number = (record.parts[-1].number if record.parts else 0) + 1 + slot
        self._number_step = slots
        self._uploads_in_flight = uploads_in_flight
        self._in_flight: deque[Future[UploadedPart]] = deque()
        self._uploader: ThreadPoolExecutor | None = None

    @classmethod
    def create(cls, storage: S3Storage, key: str, *, part_size: int = DEFAULT_PART_SIZE,
               uploads_in_flight: int = UPLOADS_IN_FLIGHT) -> "MultipartFile":
        """A new, empty part file: starts the multipart upload of ``key``."""
        return cls(storage, MultipartRecord(key=key, upload_id=storage.start_upload(key)), part_size=part_size,
                   uploads_in_flight=uploads_in_flight)

    @classmethod
    def resume(cls, storage: S3Storage, record: MultipartRecord, *, part_size: int = DEFAULT_PART_SIZE,
               slot: int = 0, slots: int = 1, uploads_in_flight: int = UPLOADS_IN_FLIGHT) -> "MultipartFile":
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
                   part_size=part_size, buffered=tail, slot=slot, slots=slots, uploads_in_flight=uploads_in_flight)

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
        size = len(view)
        while True:
            room = self.part_size - len(self._buffer)
            if len(view) < room:
                self._buffer += view
                break
            if room > 0:
                self._buffer += view[:room]
                view = view[room:]
            full, self._buffer = self._buffer, bytearray()  # a full part, handed over whole
            self._send(full)
        self._position += size
        return size

    def _number(self) -> int:
        number = self._next_number
        self._next_number += self._number_step
        if number > MAX_PARTS:
            raise StorageError(f"part file {self.storage.uri(self.record.key)} needs more than {MAX_PARTS} parts of "
                               f"{self.part_size} bytes: raise the part size or roll files smaller")
        return number

    def _send(self, data: bytearray) -> None:
        """Upload ``data`` as the next part: in the background unless ``uploads_in_flight`` is 0."""
        while self._in_flight and (self._in_flight[0].done() or len(self._in_flight) >= self._uploads_in_flight):
            self._collect_oldest()  # a failed upload is raised here, at the next full part
        self._start_upload(data)

    def _start_upload(self, data: bytearray) -> None:
        """Upload ``data`` as the next part now, or hand it to the uploader (no wait for room)."""
        if self._uploads_in_flight == 0:
            self.record.parts.append(self.storage.upload_part(self.record.key, self.record.upload_id,
                                                              self._number(), data))
            return
        self._in_flight.append(self._pool().submit(self.storage.upload_part, self.record.key, self.record.upload_id,
                                                   self._number(), data))

    def _pool(self) -> ThreadPoolExecutor:
        if self._uploader is None:  # the parts in flight and, at close, the last one beside them
            self._uploader = ThreadPoolExecutor(max_workers=self._uploads_in_flight + 1,
                                                thread_name_prefix="sparklink-part-upload")
        return self._uploader

    def _collect_oldest(self) -> None:
        """Wait for the oldest upload and record its part (parts are recorded in number order)."""
        self.record.parts.append(self._in_flight.popleft().result())

    def _drain(self) -> None:
        """Wait for every upload in flight, recording their parts; the first failure is raised."""
        try:
            while self._in_flight:
                self._collect_oldest()
        finally:
            if not self._in_flight:
                self._stop_uploader()

    def _settle(self) -> None:
        """Wait for the uploads in flight whatever they end in (the file is given up: a part no
        record names is never part of the file)."""
        for upload in self._in_flight:
            upload.exception()
        self._in_flight.clear()
        self._stop_uploader()

    def _stop_uploader(self) -> None:
        if self._uploader is not None:
            self._uploader.shutdown(wait=True)
            self._uploader = None

    # ------------------------------------------------------------------ lifecycle

    def persist(self, tail_key: str) -> MultipartRecord:
        """The record of what was written so far, for carrying the file to the next batch: full
        parts are uploaded, the tail is written to ``tail_key``. The file stays open."""
        self._drain()
        tail = bytes(self._buffer)
        self.storage.put(tail_key, tail)
        return MultipartRecord(key=self.record.key, upload_id=self.record.upload_id, parts=list(self.record.parts),
                               tail_key=tail_key, tail_size=len(tail))

    def close(self) -> None:
        """Upload the rest as the last part (the file becomes pending). A file with no byte at
        all gets one empty part, so its upload can be completed into an empty object."""
        if self.closed:
            return
        if self._buffer or not (self.record.parts or self._in_flight):
            last, self._buffer = self._buffer, bytearray()
            # beside those in flight: no buffer is being filled any more, memory stays in the bound
            self._start_upload(last)
        self._drain()
        super().close()

    def pending(self) -> MultipartRecord:
        """The record of the closed file: every part uploaded, the upload not completed."""
        if not self.closed:
            raise StorageError(f"part file {self.storage.uri(self.record.key)} is still open")
        return MultipartRecord(key=self.record.key, upload_id=self.record.upload_id, parts=list(self.record.parts))

    def detach(self) -> None:
        """Stop writing, uploading and aborting nothing: the file was :meth:`persist`-ed and goes on
        in a later task (or the upload belongs to a carried file this attempt only continued)."""
        self._settle()
        super().close()

    def abandon(self) -> None:
        """Abort the upload (a failed task's file; nothing of it is ever visible), once the parts
        in flight settled (a part sent after the abort would only fail)."""
        self._settle()
        super().close()
        self.storage.abort_upload(self.record.key, self.record.upload_id)


class MultipartNewFile(NewFile):
    """A data file written as one multipart upload (:func:`sparklink.storage.new_file.create_file`), completed by
    :meth:`finish` into an object nobody references until the driver's commit."""

    def __init__(self, storage: S3Storage, key: str):
        self.key = key
        self.storage = storage
        self.upload = MultipartFile.create(storage, key)

    @property
    def target(self) -> BinaryIO:
        return cast("BinaryIO", self.upload)  # a write-only raw file object

    def finish(self) -> float:
        record = self.upload.pending()
        self.storage.complete_upload(record.key, record.upload_id, record.parts)
        return time.time()

    def discard(self) -> None:
        if not self.upload.closed:
            self.upload.abandon()
        else:
            self.storage.abort_upload(self.upload.record.key, self.upload.record.upload_id)
            self.storage.delete(self.key)
