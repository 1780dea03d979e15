"""Part files on S3: the part-file seam (:mod:`sparklink.storage.recoverable`) as one multipart
upload per file, and a tail object for a file carried across micro-batches (Flink's S3
recoverable writer). Driver and executors.

* A new file is a multipart upload at its final key (:class:`MultipartFile`: a part goes up
  whenever ``part_size`` bytes are written); with ``staged`` (a sink with compaction, which reads
  pending files before they are finished) at its hidden key. Nothing is visible to a list or a
  get before the upload is completed.
* Closed, the file is pending: every part is uploaded, the upload is not completed. The upload
  id and the parts' numbers, ETags and sizes are kept in ``record.extra["s3Upload"]``, so a
  restarted driver can complete or abort it.
* A commit completes the upload (idempotent: an upload completed before is recognised by the
  object's size and ETag); a staged upload is completed at its hidden key, copied server-side
  to the final key and deleted.
* Carried (row formats, ``default`` rolling policy): the full parts are uploaded and the bytes
  after them (under 5 MiB, too small for a part) go to a hidden tail object
  ``<hidden key>.tail-<writerUid>``; the next micro-batch's task resumes the same upload, the
  tail read back, with part numbers of its own attempt's slot (attempts never overwrite each
  other's parts). When a commit completes a carried file its tail becomes the last part. A
  superseded tail is deleted after the commit; uploads and tails no commit names are swept.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import BinaryIO

from sparklink.errors import CommitError, StorageError
from sparklink.storage.multipart_file import MultipartFile, MultipartRecord
from sparklink.storage.recoverable import PartRecord, PartStream, RecoverableWriter, Staging
from sparklink.storage.s3 import S3Storage, UploadedPart, multipart_etag
from sparklink.storage.s3_config import DEFAULT_PART_SIZE

UPLOAD_KEY = "s3Upload"
BASE_TAIL_KEY = "s3BaseTail"  # the tail object of the carried file a part file continues
TAIL_INFIX = ".tail-"  # <hidden part file name>.tail-<writerUid>: a carried file's tail object
ATTEMPT_SLOTS = 4  # attempts that may continue one carried file (Spark's spark.task.maxFailures default)


def record_upload(part: PartRecord, record: MultipartRecord) -> None:
    part.extra[UPLOAD_KEY] = record.to_json()


def upload_of(part: PartRecord) -> MultipartRecord:
    data = part.extra.get(UPLOAD_KEY)
    if not isinstance(data, dict):
        raise CommitError(f"part file {part.final} records no S3 upload (was it written to a local path?)")
    return MultipartRecord.from_json(data)


def tail_owner(name: str) -> str | None:
    """The hidden part-file name whose tail object is named ``name``; None for any other name."""
    owner, infix, uid = name.rpartition(TAIL_INFIX)
    return owner if infix and uid and owner.startswith(".") else None


class _UploadStream(PartStream):
    """A part file being uploaded (executor side)."""

    def __init__(self, record: PartRecord, upload: MultipartFile):
        self.record = record
        self.upload = upload

    def write(self, data: bytes | memoryview) -> None:
        self.upload.write(data)

    def tell(self) -> int:
        return self.upload.tell()

    def bulk_target(self) -> BinaryIO:
        return self.upload  # type: ignore[return-value]

    def close(self) -> None:
        self.upload.close()  # a bulk writer closed it already: nothing more is sent
        record_upload(self.record, self.upload.pending())
        self.record.length = self.upload.tell()

    def persist(self, owner: str) -> None:
        carried = self.upload.persist(f"{self.record.path}{TAIL_INFIX}{owner}")
        record_upload(self.record, carried)
        self.record.length = carried.size
        self.upload.detach()

    def discard(self) -> None:
        if self.upload.closed:
            return
        if self.record.in_place:
            self.upload.detach()  # the carried file's upload stays as the last commit left it
        else:
            self.upload.abandon()  # aborted first: closing a bulk writer after it sends nothing


class S3RecoverableWriter(RecoverableWriter):
    """Part files of one output prefix on S3 (``staged``: uploads at the hidden keys)."""

    storage: S3Storage

    seals_in_place = True  # a completed upload is fixed: a task still writing to it fails

    def __init__(self, storage: S3Storage, *, part_size: int = DEFAULT_PART_SIZE, staged: bool = False):
        self.storage = storage
        self.part_size = part_size
        self.staged = staged

    # ------------------------------------------------------------------ executors

    def open(self, record: PartRecord, *, direct: bool = False) -> PartStream:
        upload = MultipartFile.create(self.storage, record.path if self.staged and not direct else record.final,
                                      part_size=self.part_size)
        record_upload(record, upload.record)
        return _UploadStream(record, upload)

    def resumes_in_place(self, attempt: int) -> bool:
        return True  # attempts take distinct part numbers of the same upload

    def resume(self, record: PartRecord, base: PartRecord, *, attempt: int) -> PartStream:
        carried = upload_of(base)
        upload = MultipartFile.resume(self.storage, carried, part_size=self.part_size, slot=attempt,
                                      slots=ATTEMPT_SLOTS)
        record_upload(record, upload.record)
        if carried.tail_key is not None:
            record.extra[BASE_TAIL_KEY] = carried.tail_key
        return _UploadStream(record, upload)

    # ------------------------------------------------------------------ driver, inside a commit

    def _complete(self, part: PartRecord) -> bool:
        """Complete the upload where it was started; a carried file's tail object is uploaded
        as its last part first (the same bytes under the same number on a replay)."""
        storage, record = self.storage, upload_of(part)
        if record.size != part.length:
            raise CommitError(f"part file {storage.uri(part.final)}: its upload holds {record.size} bytes, the "
                              f"committable says {part.length}")
        parts = list(record.parts)
        if record.tail_key is not None and (record.tail_size or not parts):
            stored = storage.read(record.tail_key)
            if stored is None:
                found = storage.info(record.key)
                if found is not None and found.size == record.size:
                    return False  # completed, and its tail deleted, by an earlier commit
                raise CommitError(f"tail object {storage.uri(record.tail_key)} of carried part file "
                                  f"{storage.uri(record.key)} is gone and the file was not completed: "
                                  f"{record.tail_size} bytes are lost (was the output changed outside the sink?)")
            if len(stored.data) != record.tail_size:
                raise CommitError(f"tail object {storage.uri(record.tail_key)} holds {len(stored.data)} bytes, not "
                                  f"the {record.tail_size} the commit recorded")
            last = UploadedPart(number=(parts[-1].number if parts else 0) + 1,
                                etag=f'"{hashlib.md5(stored.data, usedforsecurity=False).hexdigest()}"',
                                size=len(stored.data))
            found = storage.info(record.key)
            if found is not None and found.size == record.size and found.version == multipart_etag(parts + [last]):
                return False
            parts.append(storage.upload_part(record.key, record.upload_id, last.number, stored.data))
        return storage.complete_upload(record.key, record.upload_id, parts)

    def commit(self, record: PartRecord) -> bool:
        if upload_of(record).key == record.final:
            return self._complete(record)
        if self.storage.info(record.final) is not None:
            self.storage.delete(record.path)
            return False
        self._complete(record)
        self.storage.copy(record.path, record.final, size=record.length, part_size=self.part_size)
        self.storage.delete(record.path)
        return True

    def commit_hidden(self, record: PartRecord) -> None:
        self._complete(record)

    def cut_back(self, record: PartRecord) -> None:
        """Nothing to cut: the committed parts and tail object of a carried file never change
        (an attempt no commit named wrote parts of its own numbers and a tail of its own name)."""

    def is_committed(self, record: PartRecord) -> bool:
        return self.storage.info(record.final) is not None

    def clean_after_commit(self, finished: Iterable[PartRecord], carried: Iterable[PartRecord]) -> None:
        """Delete the tail objects no longer needed: those the continued files were resumed
        from, and those of files that are now complete."""
        finished, carried = list(finished), list(carried)
        keep = {upload_of(part).tail_key for part in carried}
        stale = {part.extra.get(BASE_TAIL_KEY) for part in finished + carried}
        stale |= {upload_of(part).tail_key for part in finished if part.extra.get(UPLOAD_KEY) is not None}
        for key in sorted(k for k in stale if k and k not in keep):
            self.storage.delete(key)

    # ------------------------------------------------------------------ driver, outside a commit

    def abort(self, record: PartRecord) -> None:
        """Abort the upload; a continuation (``in_place``) deletes only its own tail object, the
        upload and its committed parts stay the carried file. Tolerates what is gone."""
        data = record.extra.get(UPLOAD_KEY)
        if not isinstance(data, dict):
            return
        upload = MultipartRecord.from_json(data)
        if record.in_place:
            if upload.tail_key is not None and upload.tail_key != record.extra.get(BASE_TAIL_KEY):
                self.storage.delete(upload.tail_key)
            return
        self.storage.abort_upload(upload.key, upload.upload_id)
        if upload.tail_key is not None:
            self.storage.delete(upload.tail_key)

    def sweep(self, *, ours: Callable[[str], bool], keep: Iterable[PartRecord]) -> list[str]:
        """Abort every pending upload under the prefix that ``ours`` accepts and ``keep`` does
        not name (ListMultipartUploads, to the end) with the tail objects of its file; delete
        the tails of ``keep``'s carried files that are not their recorded ones (one LIST per
        carried file)."""
        keep = list(keep)
        kept_uploads = {upload_of(part).upload_id for part in keep if part.extra.get(UPLOAD_KEY) is not None}
        removed = []
        for upload in self.storage.pending_uploads():
            directory, _, name = upload.key.rpartition("/")
            if upload.upload_id in kept_uploads or not ours(name):
                continue
            self.storage.abort_upload(upload.key, upload.upload_id)
            removed.append(upload.key)
            hidden = name if name.startswith(".") else f".{name}.inprogress."
            for stale in self.storage.list(f"{directory}/{hidden}" if directory else hidden):
                if tail_owner(stale.key.rpartition("/")[2]) is not None:
                    self.storage.delete(stale.key)
        for part in keep:
            if part.extra.get(UPLOAD_KEY) is None:
                continue
            recorded = upload_of(part).tail_key
            if recorded is None and part.extra.get(BASE_TAIL_KEY) is None:
                continue  # a held file never carried: no tail object was ever written for it
            for stale in self.storage.list(f"{part.path}{TAIL_INFIX}"):
                if stale.key != recorded:
                    self.storage.delete(stale.key)
                    removed.append(stale.key)
        return removed

    def sweep_finished(self, finished: Iterable[PartRecord]) -> list[str]:
        """Delete every tail object of the carried files ``finished`` (the recorded one is
        deleted by the commit; these are attempts' no commit named): one LIST per such file."""
        removed = []
        for part in finished:
            if part.extra.get(UPLOAD_KEY) is None or (upload_of(part).tail_key is None
                                                      and part.extra.get(BASE_TAIL_KEY) is None):
                continue  # never carried: no tail object was ever written for it
            for stale in self.storage.list(f"{part.path}{TAIL_INFIX}"):
                self.storage.delete(stale.key)
                removed.append(stale.key)
        return removed

    # ------------------------------------------------------------------ inspection (driver, read-only)

    def staging_of(self, extra: Mapping[str, object] | None) -> Staging | None:
        data = (extra or {}).get(UPLOAD_KEY)
        if not isinstance(data, dict):
            return None
        try:
            upload = MultipartRecord.from_json(data)
        except (KeyError, TypeError, ValueError, StorageError):
            return None
        return Staging(id=upload.upload_id, size=upload.size,
                       auxiliary=frozenset({upload.tail_key} if upload.tail_key else ()))

    def unlisted(self) -> Iterator[tuple[str, str]]:
        for upload in self.storage.pending_uploads():
            yield upload.key, upload.upload_id

    def unlisted_size(self, key: str, staging_id: str) -> int:
        return self.storage.uploaded_bytes(key, staging_id)

    def auxiliary_owner(self, name: str) -> str | None:
        return tail_owner(name)
