"""S3 behind the file-I/O seam, and S3's multipart uploads (driver and executors).

Small objects (the sink's metadata) use conditional writes: a create is ``PutObject`` with
``If-None-Match: *`` and a replace is ``PutObject`` with ``If-Match: <ETag>``; the store
answers ``412 PreconditionFailed`` when the condition does not hold. A store that ignores the
conditions would let two writers both "create" one commit entry, so
:meth:`S3Storage.check_conditional_writes` probes it once when the sink starts and refuses it,
naming the endpoint, unless the user opted in with ``s3.allowUnconditionalWrites``.

Part files are multipart uploads (Flink's S3 recoverable writer): an in-progress part file is
an upload whose parts go up as data arrives, a pending one has every part uploaded, and commit
is ``CompleteMultipartUpload``; nothing is visible to a list or a get before it.
:meth:`S3Storage.complete_upload` is idempotent: an upload already completed is recognised by
the object's size and ETag, whether the store answers a repeated complete with 200 or with
``NoSuchUpload``.

One :class:`S3Storage` per process that uses it (its boto3 client is not picklable).
"""

from __future__ import annotations

import builtins
import hashlib
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

from sparklink.errors import ConfigError, StorageError
from sparklink.storage.base import FileStorage, ObjectInfo, StoredBytes
from sparklink.storage.location import S3Location
from sparklink.storage.s3_config import S3Config, S3Options, object_store_options

MIN_PART_SIZE = 5 * 1024 * 1024  # S3's minimum size of every part but the last
MAX_COPY_OBJECT_SIZE = 5 * 1024 ** 3  # S3's limit for one CopyObject: larger objects are copied part by part
MAX_PARTS = 10_000
PROBE_PREFIX = "_sparklink/probe/"
_PRECONDITION_CODES = ("PreconditionFailed", "412")
_CONFLICT_CODES = ("ConditionalRequestConflict", "409")
_MISSING_CODES = ("NoSuchKey", "404", "NotFound")
_CONFLICT_RETRIES = 3


@dataclass(frozen=True, kw_only=True)
class UploadedPart:
    """One uploaded part of a multipart upload (its number from 1, ETag and size)."""

    number: int
    etag: str
    size: int

    def to_json(self) -> dict[str, Any]:
        return {"n": self.number, "etag": self.etag, "size": self.size}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "UploadedPart":
        return cls(number=int(data["n"]), etag=str(data["etag"]), size=int(data["size"]))


@dataclass(frozen=True, kw_only=True)
class PendingUpload:
    """A multipart upload that has not been completed or aborted."""

    key: str
    upload_id: str
    initiated_at: float


def multipart_etag(parts: builtins.list[UploadedPart]) -> str:
    """The ETag S3 gives the object a multipart upload of ``parts`` completes into: the MD5 of
    the parts' binary MD5s, ``-`` and the number of parts (valid when part ETags are MD5s)."""
    digest = hashlib.md5(usedforsecurity=False)
    for part in parts:
        digest.update(bytes.fromhex(part.etag.strip('"')))
    return f'"{digest.hexdigest()}-{len(parts)}"'


def _code(exc: Exception) -> str:
    response = getattr(exc, "response", None) or {}
    error = response.get("Error") or {}
    return str(error.get("Code") or response.get("ResponseMetadata", {}).get("HTTPStatusCode") or "")


class S3Storage(FileStorage):
    """Objects under ``s3://bucket/prefix``; keys are relative to the prefix."""

    def __init__(self, location: S3Location, config: S3Config, *, client: Any = None, shared: bool = False):
        """``client``: the boto3 client to use; else, with ``shared``, this process's shared
        client for ``config``, or a client of its own. Either is made at the first request that
        needs boto3, not here: reads go through pyarrow's file system and never do, and a
        boto3 client (about 0.2 s to build, some 35,000 Python objects) kept alive in a Python
        worker makes every collection PySpark's daemon runs after each task slower."""
        self.location = location
        self.config = config
        self._client = client
        self._shared = shared

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = self.config.shared_client() if self._shared else self.config.client()
        return self._client

    # ------------------------------------------------------------------ naming

    def describe(self) -> str:
        return f"{self.location.uri()} at {self.config.describe()}"

    def uri(self, key: str) -> str:
        return f"{self.location.scheme}://{self.location.bucket}/{self.object_key(key)}"

    def object_key(self, key: str) -> str:
        return self.location.key(key)

    def relative_key(self, object_key: str) -> str:
        prefix = self.location.prefix
        return object_key[len(prefix) + 1:] if prefix else object_key

    def _error(self, operation: str, key: str, exc: Exception) -> StorageError:
        return StorageError(f"S3 {operation} of {self.uri(key)} failed at {self.config.describe()}: "
                            f"{_code(exc) or type(exc).__name__}: {exc}")

    def _call(self, operation: str, key: str, method: str, *, tolerate: tuple[str, ...] = (), **kwargs: Any) -> Any:
        """``client.<method>(Bucket=..., **kwargs)``; None when the store answers an error code
        in ``tolerate``; any other failure is a StorageError naming the object and endpoint."""
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return getattr(self.client, method)(Bucket=self.location.bucket, **kwargs)
        except ClientError as exc:
            if _code(exc) in tolerate:
                return None
            raise self._error(operation, key, exc) from None
        except BotoCoreError as exc:
            raise self._error(operation, key, exc) from None

    # ------------------------------------------------------------------ small objects

    def read(self, key: str) -> StoredBytes | None:
        response = self._call("GetObject", key, "get_object", tolerate=_MISSING_CODES, Key=self.object_key(key))
        return None if response is None else StoredBytes(data=response["Body"].read(), version=response["ETag"])

    def read_range(self, key: str, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of ``key`` (a ranged GET; the source's byte-range splits)."""
        if end <= start:
            return b""
        response = self._call("GetObject", key, "get_object", Key=self.object_key(key), Range=f"bytes={start}-{end - 1}")
        return response["Body"].read()

    def open_input(self, key: str) -> Any:
        try:
            return self.config.shared_arrow_filesystem().open_input_file(f"{self.location.bucket}/{self.object_key(key)}")
        except FileNotFoundError:
            raise
        except OSError as exc:
            raise StorageError(f"S3 open of {self.uri(key)} failed at {self.config.describe()}: {exc}") from None

    def _conditional_put(self, operation: str, key: str, data: bytes, **condition: str) -> str | None:
        from botocore.exceptions import BotoCoreError, ClientError

        for _ in range(_CONFLICT_RETRIES):
            try:
                return self.client.put_object(Bucket=self.location.bucket, Key=self.object_key(key), Body=data,
                                              **condition)["ETag"]
            except ClientError as exc:
                code = _code(exc)
                if code in _PRECONDITION_CODES:
                    return None
                if code not in _CONFLICT_CODES:  # 409: a concurrent conditional write; ask again
                    raise self._error(operation, key, exc) from None
            except BotoCoreError as exc:
                raise self._error(operation, key, exc) from None
        raise StorageError(f"S3 {operation} of {self.uri(key)} at {self.config.describe()}: the store answered "
                           f"409 ConditionalRequestConflict {_CONFLICT_RETRIES} times (another writer races for it)")

    def create_if_absent(self, key: str, data: bytes) -> str | None:
        return self._conditional_put("conditional create (If-None-Match)", key, data, IfNoneMatch="*")

    def replace(self, key: str, data: bytes, *, expected_version: str) -> str | None:
        return self._conditional_put("conditional replace (If-Match)", key, data, IfMatch=expected_version)

    def put(self, key: str, data: bytes) -> str:
        return self._call("PutObject", key, "put_object", Key=self.object_key(key), Body=data)["ETag"]

    def info(self, key: str) -> ObjectInfo | None:
        response = self._call("HeadObject", key, "head_object", tolerate=_MISSING_CODES, Key=self.object_key(key))
        if response is None:
            return None
        return ObjectInfo(key=key, size=int(response["ContentLength"]),
                          modified_at=response["LastModified"].timestamp(), version=response["ETag"])

    def list(self, prefix: str = "", *, start_after: str | None = None, read_ahead: bool = False,
             page_size: int = 1000) -> Iterator[ObjectInfo]:
        """Every object under ``prefix`` (after ``start_after``) in key order, ``page_size``
        keys per ``ListObjectsV2``. With ``read_ahead`` (the file source's listing, which reads to the end)
        the next page is requested while the caller goes through the current one: one page at
        most is held ahead, and a caller that stops early has cost one page more."""
        kwargs: dict[str, Any] = {"Prefix": self.object_key(prefix) if prefix else self._root_prefix(),
                                  "MaxKeys": page_size}
        if start_after is not None:
            kwargs["StartAfter"] = self.object_key(start_after)
        from botocore.exceptions import BotoCoreError, ClientError

        def page(token: str | None) -> dict[str, Any]:
            extra = {} if token is None else {"ContinuationToken": token}
            return self.client.list_objects_v2(Bucket=self.location.bucket, **kwargs, **extra)

        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sparklink-list") if read_ahead else None
        token: str | None = None
        try:
            current = page(None)
            while True:
                previous, token = token, current.get("NextContinuationToken") if current.get("IsTruncated") else None
                if token is not None and token == previous:
                    raise StorageError(f"S3 ListObjectsV2 under {self.uri(prefix)} at {self.config.describe()}: "
                                       "the store says the list goes on but repeats its continuation token")
                following = None if token is None or pool is None else pool.submit(page, token)
                for item in current.get("Contents", ()):
                    yield ObjectInfo(key=self.relative_key(item["Key"]), size=int(item["Size"]),
                                     modified_at=item["LastModified"].timestamp(), version=item["ETag"])
                if token is None:
                    return
                current = following.result() if following is not None else page(token)
        except (ClientError, BotoCoreError) as exc:
            raise self._error("ListObjectsV2", prefix, exc) from None
        finally:
            if pool is not None:
                pool.shutdown(wait=False, cancel_futures=True)

    def names(self, directory: str, prefix: str = "") -> builtins.list[str]:
        base = f"{self.object_key(directory)}/" if directory else self._root_prefix()
        paginator = self.client.get_paginator("list_objects_v2")
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return [item["Key"][len(base):]
                    for page in paginator.paginate(Bucket=self.location.bucket, Prefix=base + prefix, Delimiter="/")
                    for item in page.get("Contents", ())]
        except (ClientError, BotoCoreError) as exc:
            raise self._error("ListObjectsV2", directory, exc) from None

    def object_store_options(self) -> dict[str, str] | None:
        return object_store_options(self.config, self.location.uri())

    def _root_prefix(self) -> str:
        return f"{self.location.prefix}/" if self.location.prefix else ""

    def delete(self, key: str) -> None:
        self._call("DeleteObject", key, "delete_object", Key=self.object_key(key))

    def copy(self, source_key: str, target_key: str, *, size: int, part_size: int) -> None:
        """Server-side copy of ``source_key`` (``size`` bytes) to ``target_key``: one
        ``CopyObject`` up to :data:`MAX_COPY_OBJECT_SIZE` (S3's limit, 5 GB); above it a
        multipart upload of ``UploadPartCopy`` ranges of ``part_size`` (more when 10,000 parts
        would not hold the object), completed as the sink completes its part files, aborted if a
        step fails. The target is invisible until the upload completes; an upload a killed driver
        left is never completed (the sink's sweep of uploads no commit names aborts it) and the
        copy starts again when the commit is rolled forward."""
        source = {"Bucket": self.location.bucket, "Key": self.object_key(source_key)}
        if size <= MAX_COPY_OBJECT_SIZE:
            self._call("CopyObject", target_key, "copy_object", Key=self.object_key(target_key), CopySource=source)
            return
        part_size = max(part_size, MIN_PART_SIZE, -(-size // MAX_PARTS))
        upload_id = self.start_upload(target_key)
        try:
            parts = []
            for number, start in enumerate(range(0, size, part_size), start=1):
                end = min(start + part_size, size)
                response = self._call("UploadPartCopy", target_key, "upload_part_copy", Key=self.object_key(target_key),
                                      UploadId=upload_id, PartNumber=number, CopySource=source,
                                      CopySourceRange=f"bytes={start}-{end - 1}")
                parts.append(UploadedPart(number=number, etag=response["CopyPartResult"]["ETag"], size=end - start))
            self.complete_upload(target_key, upload_id, parts)
        except BaseException:
            self.abort_upload(target_key, upload_id)
            raise

    def uploaded_bytes(self, key: str, upload_id: str) -> int:
        """Bytes in the parts of an incomplete upload (ListParts, every page)."""
        total, kwargs = 0, {"Key": self.object_key(key), "UploadId": upload_id}
        while True:
            page = self._call("ListParts", key, "list_parts", tolerate=("NoSuchUpload", "404"), **kwargs)
            if page is None:  # completed or aborted meanwhile
                return total
            total += sum(int(part["Size"]) for part in page.get("Parts", ()))
            if not page.get("IsTruncated") or not page.get("NextPartNumberMarker"):
                return total
            kwargs["PartNumberMarker"] = page["NextPartNumberMarker"]

    # ------------------------------------------------------------------ multipart uploads

    def start_upload(self, key: str) -> str:
        """A new multipart upload for ``key``; its upload id (invisible until completed)."""
        return self._call("CreateMultipartUpload", key, "create_multipart_upload", Key=self.object_key(key))["UploadId"]

    def upload_part(self, key: str, upload_id: str, number: int, data: bytes | bytearray) -> UploadedPart:
        """Upload part ``number`` (1..10000); every part but the last holds at least 5 MiB."""
        if not 1 <= number <= MAX_PARTS:
            raise StorageError(f"S3 upload of {self.uri(key)}: part number {number} is outside 1..{MAX_PARTS}")
        response = self._call("UploadPart", key, "upload_part", Key=self.object_key(key), UploadId=upload_id,
                              PartNumber=number, Body=data)
        return UploadedPart(number=number, etag=response["ETag"], size=len(data))

    def complete_upload(self, key: str, upload_id: str, parts: builtins.list[UploadedPart]) -> bool:
        """Complete the upload into the object ``key``: True if this call completed it, False if
        it was completed before (the object's size and ETag match ``parts``). StorageError if
        the upload is gone and the object is not the one these parts make."""
        from botocore.exceptions import BotoCoreError, ClientError

        expected_size = sum(p.size for p in parts)
        try:
            self.client.complete_multipart_upload(
                Bucket=self.location.bucket, Key=self.object_key(key), UploadId=upload_id,
                MultipartUpload={"Parts": [{"PartNumber": p.number, "ETag": p.etag} for p in parts]})
        except ClientError as exc:
            if _code(exc) != "NoSuchUpload":
                raise self._error("CompleteMultipartUpload", key, exc) from None
            found = self.info(key)
            if found is not None and found.size == expected_size and found.version == multipart_etag(parts):
                return False
            seen = "no object" if found is None else f"an object of {found.size} bytes, ETag {found.version}"
            raise StorageError(f"S3 upload {upload_id} of {self.uri(key)} at {self.config.describe()} is gone "
                               f"(NoSuchUpload) and the store holds {seen}, not the {expected_size} bytes, ETag "
                               f"{multipart_etag(parts)} its {len(parts)} parts make: it was aborted (a bucket "
                               "lifecycle rule?) or changed outside the sink") from None
        except BotoCoreError as exc:
            raise self._error("CompleteMultipartUpload", key, exc) from None
        return True

    def abort_upload(self, key: str, upload_id: str) -> None:
        """Abort the upload; an upload already gone is fine."""
        self._call("AbortMultipartUpload", key, "abort_multipart_upload", tolerate=("NoSuchUpload", "404"),
                   Key=self.object_key(key), UploadId=upload_id)

    def pending_uploads(self, prefix: str = "", *, page_size: int = 1000) -> Iterator[PendingUpload]:
        """Every upload not completed nor aborted under ``prefix`` (ListMultipartUploads, pages
        of ``page_size`` followed to the end)."""
        kwargs: dict[str, Any] = {"Prefix": self.object_key(prefix) if prefix else self._root_prefix(),
                                  "MaxUploads": page_size}
        while True:
            page = self._call("ListMultipartUploads", prefix, "list_multipart_uploads", **kwargs)
            for upload in page.get("Uploads", ()):
                yield PendingUpload(key=self.relative_key(upload["Key"]), upload_id=upload["UploadId"],
                                    initiated_at=upload["Initiated"].timestamp())
            if not page.get("IsTruncated"):
                return
            # AWS gives both markers; SeaweedFS pages by upload id alone (no NextKeyMarker)
            markers = {"KeyMarker": page.get("NextKeyMarker") or None,
                       "UploadIdMarker": page.get("NextUploadIdMarker") or None}
            if not any(markers.values()) or all(kwargs.get(k) == v for k, v in markers.items()):
                raise StorageError(f"S3 ListMultipartUploads under {self.uri(prefix)} at {self.config.describe()}: "
                                   "the store says the list goes on but gives no new marker")
            for name, marker in markers.items():
                if marker is None:
                    kwargs.pop(name, None)
                else:
                    kwargs[name] = marker

    def exclusive(self, key: str) -> Any:
        """No lock on S3: the lease's conditional writes (``If-Match``) fence a second writer;
        a driver frozen longer than ``leaseTimeout`` could race a finish (docs/object-stores.md)."""
        return nullcontext()

    # ------------------------------------------------------------------ start-up check

    def check_conditional_writes(self) -> None:
        """Refuse a store that ignores ``If-None-Match`` / ``If-Match`` (driver, once per query
        start): create a probe object twice and replace it with a stale ETag; both second
        writes must be refused. ConfigError naming the endpoint unless
        ``s3.allowUnconditionalWrites`` is true (then the sink relies on being the only writer)."""
        probe = f"{PROBE_PREFIX}{uuid.uuid4().hex}"
        try:
            created = self.create_if_absent(probe, b"first")
            created_again = self.create_if_absent(probe, b"second")
            current = self.read(probe)
            stale = '"00000000000000000000000000000000"'
            replaced = current is not None and current.version != stale and \
                self.replace(probe, b"third", expected_version=stale) is not None
        finally:
            self.delete(probe)
        if created is not None and created_again is None and not replaced:
            return
        if self.config.allow_unconditional_writes:
            return
        raise ConfigError(S3Options.allow_unconditional_writes.key,
                          f"the S3 store at {self.config.effective_endpoint() or 'AWS S3'} ignores conditional writes "
                          "(a PutObject with If-None-Match: * or a stale If-Match succeeded), so the sink cannot "
                          "create its commit log atomically. Use a store that honours them, or set "
                          f"'{S3Options.allow_unconditional_writes}' to true if no other writer can ever touch "
                          f"{self.location.uri()} (unsafe)", "true to accept the unsafe store")
