"""The file sink's writer (Flink's FileWriter with its per-bucket writers), run on executors.

One :class:`FileSinkWriter` per Spark write task. For each Arrow record batch it asks the
bucket assigner for (bucket, rows) pairs and appends the rows to the bucket's open part file,
a hidden ``.part-...inprogress.<tag>`` file. A file rolls (becomes pending) when the rolling
policy says so on size, and at the end of the task unless the policy carries it to the next
micro-batch. :meth:`FileSinkWriter.prepare_commit` returns one committable (a
:class:`~sparklink.files.sink.part_files.PartFile`) per file.

Carried files (row formats, default rolling policy): the task of partition p continues the
in-progress file the last commit recorded for (bucket, p). Attempt 0 truncates it to the
recorded length (dropping whatever a crashed run appended) and appends in place; a retry or a
speculative attempt copies the recorded bytes into a new file of its own, so two attempts never
write to one file.

On S3 (``s3``: an :class:`~sparklink.files.sink.s3_parts.S3Output`) a part file is a multipart
upload at its finished key (:mod:`sparklink.files.sink.s3_parts`): the same writer logic, the
bytes go up in parts as they are written, and closing the file uploads its last part (it is
then pending). A carried file on S3 keeps its upload across batches: its tail goes to a tail
object at the end of the task, and the next task resumes the same upload (attempts take
distinct part numbers, so none overwrites another's parts).

Bulk files buffer rows for their next row group (Parquet), stripe (ORC) or block (Avro). The
task bounds the total: after each record batch, while the buffers of all its open files hold
more than ``writeBufferSize`` bytes, the largest is written out early (ORC: its file rolls).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pyarrow as pa

from sparklink.errors import naming_path
from sparklink.faults import fault_point
from sparklink.files.sink.bucket_assigners import BucketAssigner
from sparklink.files.sink.formats import BulkWriter, FormatConfig, RowEncoder
from sparklink.files.sink.output_file_config import OutputFileConfig
from sparklink.files.sink.part_files import (IN_PROGRESS, PENDING, PartFile, bucket_dir, finished_name,
                                             in_progress_name, job_tag, new_writer_uid, relative, stream_tag,
                                             truncate_to)
from sparklink.files.sink.rolling_policies import RollingPolicy
from sparklink.files.sink.s3_parts import (S3Output, abort_part, job_writer_uid, open_part, persist_part,
                                          record_upload, resume_part)
from sparklink.storage.multipart_file import MultipartFile
from sparklink.sink.writer import Committable, SinkWriter, WriterContext

COPY_CHUNK = 8 * 1024 * 1024


class _OpenPart:
    """One open part file of one bucket (row or bulk); ``upload``: its S3 multipart upload."""

    def __init__(self, record: PartFile, root: Path, upload: MultipartFile | None = None):
        self.record = record
        self.path = root / record.path if upload is None else upload.storage.uri(record.final)
        self.upload = upload
        self.row_handle = None
        self.bulk: BulkWriter | None = None

    @property
    def size(self) -> int:
        if self.bulk is not None:
            return self.bulk.size()
        return self.record.length

    def close(self) -> None:
        with naming_path(self.path):
            self._close()

    def _close(self) -> None:
        if self.bulk is not None:
            self.record.length = self.bulk.close()
            self.bulk = None
        if self.row_handle is not None:
            self.row_handle.flush()
            if self.upload is None:
                os.fsync(self.row_handle.fileno())
            self.record.length = self.row_handle.tell()
            self.row_handle.close()
            self.row_handle = None
        if self.upload is not None:  # every part is uploaded: the committable names them
            record_upload(self.record, self.upload.pending())

    def discard_handles(self) -> None:
        if self.upload is not None and not self.upload.closed:
            if self.record.in_place:
                self.upload.detach()  # the carried file's upload: it stays as the last commit left it
            else:
                self.upload.abandon()  # aborted first: closing the writers below sends nothing
        for closer in (self.bulk, self.row_handle):
            if closer is not None:
                try:
                    closer.close()
                except (OSError, ValueError):
                    pass  # the file is removed, truncated or aborted right after; its content no longer matters
        self.bulk = None
        self.row_handle = None


class FileSinkWriter(SinkWriter):
    """Executor side: stages one task's rows in hidden part files, bucket by bucket."""

    def __init__(self, *, root: Path, context: WriterContext, format_config: FormatConfig,
                 assigner: BucketAssigner, rolling_policy: RollingPolicy, output_config: OutputFileConfig,
                 carried: dict[str, PartFile], carry: bool, s3: S3Output | None = None):
        self.root = root
        self.s3 = s3
        self.storage = s3.storage() if s3 is not None else None
        self.context = context
        self.format = format_config
        self.assigner = assigner
        self.policy = rolling_policy
        self.output = output_config
        self.carried = dict(carried)
        self.carry = carry
        self.uid = job_writer_uid(context.job_id) if s3 is not None and not context.streaming else new_writer_uid()
        self.tag = stream_tag() if context.streaming else job_tag(context.job_id)
        self.suffix = output_config.suffix_for(format_config.extension)
        self.counter = 0
        self.open: dict[str, _OpenPart] = {}
        self.done: list[_OpenPart] = []
        self.encoder: RowEncoder | None = None

    # ------------------------------------------------------------------ opening files

    def _new_record(self, bucket: str, now: float) -> PartFile:
        final = finished_name(self.output.part_prefix, self.uid, self.counter, self.suffix)
        self.counter += 1
        return PartFile(bucket=bucket, partition=self.context.partition_id,
                        path=relative(bucket, in_progress_name(final, self.tag)), final=relative(bucket, final),
                        state=IN_PROGRESS, length=0, rows=0, created_at=now, last_write_at=now)

    def _open(self, bucket: str, schema: pa.Schema, now: float) -> _OpenPart:
        if self.s3 is not None:
            return self._open_upload(bucket, schema, now)
        with naming_path(bucket_dir(self.root, bucket)):
            bucket_dir(self.root, bucket).mkdir(parents=True, exist_ok=True)
        base = self.carried.pop(bucket, None)
        if base is not None and not self.format.bulk:
            with naming_path(self.root / base.path):
                return self._continue(base, now)
        part = _OpenPart(self._new_record(bucket, now), self.root)
        with naming_path(part.path):
            if self.format.bulk:
                part.bulk = self.format.bulk_writer(part.path, schema)
            else:
                part.row_handle = open(part.path, "wb")  # noqa: SIM115 - closed by _OpenPart.close
                header = self._encoder(schema).header()
                part.row_handle.write(header)
                part.record.length = len(header)
        return part

    def _open_upload(self, bucket: str, schema: pa.Schema, now: float) -> _OpenPart:
        """A new part file on S3: a multipart upload at its finished key; or the continuation
        of the carried file of this bucket (row formats): its upload resumed."""
        base = self.carried.pop(bucket, None)
        if base is not None and not self.format.bulk:
            record = PartFile(**{**base.__dict__, "extra": dict(base.extra)})
            record.base_path, record.base_length, record.in_place = base.path, base.length, True
            part = _OpenPart(record, self.root, resume_part(self.storage, base, record,
                                                            attempt=self.context.attempt_number,
                                                            part_size=self.s3.part_size))
            part.row_handle = part.upload
            return part
        record = self._new_record(bucket, now)
        part = _OpenPart(record, self.root, open_part(self.storage, record, self.s3.part_size,
                                                      hidden=self.s3.stage_hidden))
        if self.format.bulk:
            part.bulk = self.format.bulk_writer(part.upload, schema)
        else:
            part.row_handle = part.upload
            header = self._encoder(schema).header()
            part.row_handle.write(header)
            part.record.length = len(header)
        return part

    def _continue(self, base: PartFile, now: float) -> _OpenPart:
        """Continue a carried in-progress file: in place on attempt 0, else in a copy."""
        if self.context.attempt_number == 0:
            record = PartFile(**{**base.__dict__, "extra": dict(base.extra)})
            record.base_path, record.base_length, record.in_place = base.path, base.length, True
            part = _OpenPart(record, self.root)
            truncate_to(part.path, base.length)
            part.row_handle = open(part.path, "r+b")  # noqa: SIM115 - closed by _OpenPart.close
            part.row_handle.seek(base.length)
        else:
            record = self._new_record(base.bucket, now)
            record.created_at = base.created_at
            record.base_path, record.base_length, record.in_place = base.path, base.length, False
            record.rows = base.rows
            part = _OpenPart(record, self.root)
            part.row_handle = open(part.path, "wb")  # noqa: SIM115 - closed by _OpenPart.close
            with open(self.root / base.path, "rb") as source:
                remaining = base.length
                while remaining > 0:
                    chunk = source.read(min(remaining, COPY_CHUNK))
                    if not chunk:
                        raise OSError(f"carried in-progress file {self.root / base.path} is shorter than the "
                                      f"{base.length} bytes the last commit recorded")
                    part.row_handle.write(chunk)
                    remaining -= len(chunk)
        part.record.length = base.length
        return part

    def _encoder(self, schema: pa.Schema) -> RowEncoder:
        if self.encoder is None:
            self.encoder = self.format.row_encoder(schema)
        return self.encoder

    # ------------------------------------------------------------------ writing

    def write_batch(self, batch: pa.RecordBatch) -> None:
        now = time.time()
        for bucket, rows in self.assigner.split(batch, now):
            if self.format.bulk:
                part = self._part(bucket, rows.schema, now)
                with naming_path(part.path):
                    part.bulk.write_batch(rows)
                self._wrote(bucket, part, rows.num_rows, now)
            else:
                self._write_rows(bucket, rows, now)
        if self.format.bulk:
            self._bound_buffers()

    def buffered_bytes(self) -> int:
        """Memory the open bulk files hold for rows not yet written (at most ``writeBufferSize``
        between record batches)."""
        return sum(part.bulk.buffered_bytes() for part in self.open.values() if part.bulk is not None)

    def _bound_buffers(self) -> None:
        """Write out the largest buffers until the task's total fits ``writeBufferSize``."""
        held = {bucket: part.bulk.buffered_bytes() for bucket, part in self.open.items() if part.bulk is not None}
        total = sum(held.values())
        while total > self.format.write_buffer_size and held:
            bucket = max(held, key=held.__getitem__)
            total -= held.pop(bucket)
            if not self.open[bucket].bulk.release():
                self._roll(bucket)

    def _part(self, bucket: str, schema: pa.Schema, now: float) -> _OpenPart:
        part = self.open.get(bucket)
        if part is None:
            part = self.open[bucket] = self._open(bucket, schema, now)
        return part

    def _write_rows(self, bucket: str, rows: pa.RecordBatch, now: float) -> None:
        """Append encoded rows; split them so a file rolls close to ``maxPartSize``."""
        encoder = self._encoder(rows.schema)
        limit = self.policy.max_part_size
        while rows.num_rows:
            part = self._part(bucket, rows.schema, now)
            data = encoder.encode(rows)
            if limit is not None and rows.num_rows > 1 and part.record.length + len(data) > limit:
                room = max(1, int((limit - part.record.length) * rows.num_rows / len(data)))
                if room < rows.num_rows:
                    head, rows = rows.slice(0, room), rows.slice(room)
                    self._append(bucket, part, encoder.encode(head), head.num_rows, now)
                    continue
            self._append(bucket, part, data, rows.num_rows, now)
            break

    def _append(self, bucket: str, part: _OpenPart, data: bytes, count: int, now: float) -> None:
        with naming_path(part.path):
            part.row_handle.write(data)
        part.record.length += len(data)
        self._wrote(bucket, part, count, now)

    def _wrote(self, bucket: str, part: _OpenPart, count: int, now: float) -> None:
        part.record.rows += count
        part.record.last_write_at = now
        if self.policy.should_roll_on_size(part.size) or \
                (not self.policy.carries_across_batches and self.policy.should_roll_on_time(
                    created_at=part.record.created_at, last_write_at=now, now=now)):
            self._roll(bucket)

    def _roll(self, bucket: str) -> None:
        part = self.open.pop(bucket)
        part.close()
        part.record.state = PENDING
        self.done.append(part)

    def flush(self) -> None:
        for bucket in list(self.open):
            part = self.open[bucket]
            if self.carry and part.upload is not None:
                persist_part(part.record, part.upload, self.uid)
                part.upload.detach()
                part.row_handle = None
                part.record.state = IN_PROGRESS
                self.done.append(self.open.pop(bucket))
            elif self.carry:
                part.close()
                part.record.state = IN_PROGRESS
                self.done.append(self.open.pop(bucket))
            else:
                self._roll(bucket)

    def prepare_commit(self) -> list[Committable]:
        fault_point("filesink.writer.before_commit", batch_id=self.context.batch_id, attempt=self.context.attempt_number)
        return [part.record.to_json() for part in self.done]

    def abort(self) -> None:
        """Remove this attempt's new files; cut carried files back to their committed length."""
        for part in list(self.open.values()) + self.done:
            part.discard_handles()
            if self.storage is not None:
                abort_part(self.storage, part.record)
            elif part.record.in_place:
                truncate_to(part.path, part.record.base_length)
            else:
                part.path.unlink(missing_ok=True)
        self.open.clear()
        self.done.clear()

    def close(self) -> None:
        for part in self.open.values():
            part.discard_handles()
