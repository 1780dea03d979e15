"""The file sink's part files on S3: one multipart upload each (executor and driver side).

Flink's S3 recoverable writer on the storage seam (:mod:`sparklink.storage`):

* in-progress: a task starts a multipart upload *at the finished key* of the part file (with
  compaction on: at its hidden name, as compaction reads pending files; see
  :func:`~sparklink.files.sink.compaction.run_compaction_on_s3`) and uploads a part whenever
  ``s3.partSize`` bytes are written (:class:`MultipartFile`);
* pending: the task closed the file; every part is uploaded, the upload is not completed. The
  upload id and the parts' numbers, ETags and sizes travel in the committable
  (``PartFile.extra["s3Upload"]``) and are recorded in the commit log entry and the state file,
  so a restarted driver can complete or abort them;
* finished: the committer's ``CompleteMultipartUpload``, after the commit log entry and the
  state are written. Completing again is a no-op: an upload already completed is recognised
  by the object's size and ETag (:meth:`S3Storage.complete_upload`).

Nothing is visible to an S3 list or get before the upload is completed, so without compaction
no hidden name is needed and ``PartFile.path`` keeps the hidden name as the part file's identity
only; with compaction the upload completed at the hidden name stays unlisted by readers (they
skip hidden names) until compaction rewrites it under its finished name. Uploads that
no commit names (failed attempts, a killed driver, replays of committed batches) are aborted:
:func:`stale_uploads` lists every pending upload under the output prefix (ListMultipartUploads,
paginated to the end).

Carried files (row formats, ``default`` rolling policy): at the end of a micro-batch the task
uploads the file's full parts and writes the bytes after them (under 5 MiB, too small for a
part) to a hidden *tail object* ``<hidden name>.tail-<writerUid>``; the committable records the
upload, its parts and the tail. The next micro-batch's task resumes the same upload (the tail
read back into its buffer) with part numbers of its own attempt
(:class:`~sparklink.storage.multipart_file.MultipartFile`, ``slot``). When the driver
rolls a carried file (time, size) the commit uploads its tail as the last part and completes
the upload. A superseded tail is deleted after the commit; a replay's or failed attempt's tail
is deleted with it, and its parts are never named, so the carried file is exactly what the last
commit recorded.

Writers of ``df.write`` jobs on S3 take a writer uid starting with ``j`` and a digest of the
job id (stream writers' uids are hex), so a streaming query's sweep never aborts a batch job's
uploads and a failed job finds the uploads of its own failed tasks.
"""

from __future__ import annotations

import hashlib
import re
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from sparklink.errors import CommitError, ConfigError
from sparklink.files.sink.part_files import PartFile, parse_in_progress
from sparklink.storage.location import S3Location
from sparklink.storage.multipart_file import DEFAULT_PART_SIZE, MultipartFile, MultipartRecord
from sparklink.storage.s3 import MIN_PART_SIZE, PendingUpload, S3Storage, UploadedPart, multipart_etag
from sparklink.storage.s3_config import S3Config
from sparklink.options import Options, parse_size

OPTION_S3_PART_SIZE = "s3.partSize"
UPLOAD_KEY = "s3Upload"
BASE_TAIL_KEY = "s3BaseTail"  # the tail object of the carried file a part file continues
TAIL_INFIX = ".tail-"  # <hidden part file name>.tail-<writerUid>: a carried file's tail object
JOB_UID_PREFIX = "j"
ATTEMPT_SLOTS = 4  # attempts that may continue one carried file (Spark's spark.task.maxFailures default)
_CLIENTS: dict[S3Config, Any] = {}  # one boto3 client per S3 config and process
_CLIENTS_LOCK = threading.Lock()


@dataclass(frozen=True, kw_only=True)
class S3Output:
    """Where the sink's objects go on S3 and how big its upload parts are (picklable: it
    travels to the executors, which build their own client with :meth:`storage`)."""

    location: S3Location
    config: S3Config
    part_size: int = DEFAULT_PART_SIZE
    stage_hidden: bool = False  # uploads at the hidden names (compaction reads them before they finish)

    def __post_init__(self) -> None:
        if self.part_size < MIN_PART_SIZE:
            raise ConfigError(OPTION_S3_PART_SIZE, f"{self.part_size} bytes is below S3's minimum part size of "
                              f"{MIN_PART_SIZE} bytes", "5MB or more, e.g. 8MB")

    @classmethod
    def from_options(cls, location: S3Location, opts: Options) -> "S3Output":
        value = opts.get(OPTION_S3_PART_SIZE)
        part_size = parse_size(OPTION_S3_PART_SIZE, value) if value is not None else DEFAULT_PART_SIZE
        return cls(location=location, config=S3Config.from_options(opts), part_size=part_size)

    def storage(self) -> S3Storage:
        """A storage on this process's client for the config (a boto3 client is thread-safe and
        costs about 0.2 s to build: tasks and micro-batches of one Python worker share it)."""
        with _CLIENTS_LOCK:
            client = _CLIENTS.get(self.config)
            if client is None:
                client = _CLIENTS[self.config] = self.config.client()
        return S3Storage(self.location, self.config, client=client)


def job_writer_uid(job_id: str) -> str:
    """A writer uid for a task of ``df.write`` job ``job_id`` on S3 (16 characters)."""
    return job_uid_prefix(job_id) + uuid.uuid4().hex[:8]


def job_uid_prefix(job_id: str) -> str:
    return JOB_UID_PREFIX + hashlib.sha1(job_id.encode("utf-8"), usedforsecurity=False).hexdigest()[:7]


def open_part(storage: S3Storage, part: PartFile, part_size: int, *, hidden: bool = False) -> MultipartFile:
    """Start the upload of a new part file at its finished key, or with ``hidden`` (compaction)
    at its hidden name (executor, once per file)."""
    output = MultipartFile.create(storage, part.path if hidden else part.final, part_size=part_size)
    record_upload(part, output.record)
    return output


def resume_part(storage: S3Storage, base: PartFile, part: PartFile, *, attempt: int,
                part_size: int) -> MultipartFile:
    """Continue the carried file ``base`` as ``part`` in task attempt ``attempt`` (executor):
    the same upload, its tail read back, part numbers of this attempt's slot."""
    record = upload_of(base)
    output = MultipartFile.resume(storage, record, part_size=part_size, slot=attempt, slots=ATTEMPT_SLOTS)
    record_upload(part, output.record)
    if record.tail_key is not None:
        part.extra[BASE_TAIL_KEY] = record.tail_key
    return output


def persist_part(part: PartFile, output: MultipartFile, writer_uid: str) -> None:
    """Carry ``part`` to the next micro-batch (executor, end of task): full parts are uploaded,
    the rest goes to this attempt's tail object."""
    record = output.persist(f"{part.path}{TAIL_INFIX}{writer_uid}")
    record_upload(part, record)
    part.length = record.size


def tail_owner(name: str) -> str | None:
    """The hidden part file name whose tail object is named ``name``; None for any other name."""
    owner, infix, uid = name.rpartition(TAIL_INFIX)
    return owner if infix and uid and parse_in_progress(owner) is not None else None


def record_upload(part: PartFile, record: MultipartRecord) -> None:
    part.extra[UPLOAD_KEY] = record.to_json()


def upload_of(part: PartFile) -> MultipartRecord:
    data = part.extra.get(UPLOAD_KEY)
    if not isinstance(data, dict):
        raise CommitError(f"part file {part.final} records no S3 upload (was it written to a local path?)")
    return MultipartRecord.from_json(data)


def complete_part(storage: S3Storage, part: PartFile) -> bool:
    """Complete the pending part file's upload (driver, in the commit); True if this call did it,
    False if an earlier (crashed) commit did. Idempotent. A carried file the driver rolls still
    has a tail object: it is uploaded as the last part first (the same bytes under the same part
    number on a replay); its deletion comes after the commit (:func:`tails_after_commit`)."""
    record = upload_of(part)
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
            raise CommitError(f"tail object {storage.uri(record.tail_key)} holds {len(stored.data)} bytes, not the "
                              f"{record.tail_size} the commit recorded")
        last = UploadedPart(number=(parts[-1].number if parts else 0) + 1,
                            etag=f'"{hashlib.md5(stored.data, usedforsecurity=False).hexdigest()}"',
                            size=len(stored.data))
        found = storage.info(record.key)
        if found is not None and found.size == record.size and found.version == multipart_etag(parts + [last]):
            return False
        parts.append(storage.upload_part(record.key, record.upload_id, last.number, stored.data))
    return storage.complete_upload(record.key, record.upload_id, parts)


def finish_part(storage: S3Storage, part: PartFile, *, part_size: int = DEFAULT_PART_SIZE) -> None:
    """Make a pending part file visible (driver, in the commit; idempotent): complete its upload
    at the finished key; an upload staged at the hidden name (compaction on) is completed there,
    copied server-side to the finished key (over 5 GB: part by part, ``part_size`` a part, see
    :meth:`S3Storage.copy`) and deleted."""
    if upload_of(part).key == part.final:
        complete_part(storage, part)
        return
    if storage.info(part.final) is None:
        complete_part(storage, part)
        storage.copy(part.path, part.final, size=part.length, part_size=part_size)
    storage.delete(part.path)


def tails_after_commit(finished: list[PartFile], carried: list[PartFile]) -> set[str]:
    """Tail objects no longer needed once a commit finished ``finished`` and carries
    ``carried``: the tails the continued files were resumed from, and the tails of files that
    are now complete."""
    keep = {upload_of(part).tail_key for part in carried}
    stale = {part.extra.get(BASE_TAIL_KEY) for part in finished + carried}
    stale |= {upload_of(part).tail_key for part in finished}
    return {key for key in stale if key and key not in keep}


def abort_part(storage: S3Storage, part: PartFile) -> None:
    """Drop what a part file that is never committed staged (driver or executor): its upload is
    aborted; for the continuation of a carried file (``in_place``) only this attempt's tail
    object is deleted, the upload and its committed parts stay the carried file. Tolerates what
    is gone."""
    data = part.extra.get(UPLOAD_KEY)
    if not isinstance(data, dict):
        return
    record = MultipartRecord.from_json(data)
    if part.in_place:
        if record.tail_key is not None and record.tail_key != part.extra.get(BASE_TAIL_KEY):
            storage.delete(record.tail_key)
        return
    storage.abort_upload(record.key, record.upload_id)
    if record.tail_key is not None:
        storage.delete(record.tail_key)


def _part_name(part_prefix: str) -> re.Pattern[str]:
    # finished or hidden names; writer uids of streams (hex), of jobs (j...), of compactions (c<batch>) and
    # of sparklink.files.finish's compactions and copies (f<batch>)
    return re.compile(rf"^\.?{re.escape(part_prefix)}-(?P<uid>[0-9a-f]{{16}}|{JOB_UID_PREFIX}[0-9a-f]{{15}}|[cf]\d{{8}})-\d+")


def stale_uploads(storage: S3Storage, *, part_prefix: str, keep: set[str],
                  job_id: str | None = None) -> Iterator[PendingUpload]:
    """Pending uploads of this sink's part files under the output prefix that are not in ``keep``
    (upload ids): those of streaming writers, or with ``job_id`` those of that ``df.write`` job.
    Driver side, after a commit (streaming) or when a job is aborted."""
    pattern = _part_name(part_prefix)
    job_prefix = job_uid_prefix(job_id) if job_id is not None else None
    for upload in storage.pending_uploads():
        match = pattern.match(upload.key.rpartition("/")[2])
        if match is None or upload.upload_id in keep:
            continue
        uid = match.group("uid")
        if (uid.startswith(job_prefix) if job_prefix is not None else not uid.startswith(JOB_UID_PREFIX)):
            yield upload
