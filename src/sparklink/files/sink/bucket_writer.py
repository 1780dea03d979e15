"""The file sink's writer (Flink's FileWriter with its per-bucket writers), run on executors.

One :class:`FileSinkWriter` per Spark write task. For each Arrow record batch it asks the
bucket assigner for (bucket, rows) pairs and appends the rows to the bucket's open part file,
a hidden ``.part-...inprogress.<tag>`` file. A file rolls (becomes pending) when the rolling
policy says so on size, and at the end of the task unless the policy carries it to the next
micro-batch. :meth:`FileSinkWriter.prepare_commit` returns one committable (a
:class:`~sparklink.files.sink.part_files.PartFile`) per file.

Carried files (row formats, default rolling policy): the task of partition p continues the
in-progress file the last commit recorded for (bucket, p), at its committed length, through the
part-file seam (:meth:`~sparklink.storage.recoverable.RecoverableWriter.resume`): in place, or in
a copy of its own where the store cannot let two attempts write one file (a local retry).

Files are written through the output's part-file seam (:mod:`sparklink.storage.recoverable`):
hidden local files, or S3 multipart uploads; this module does not know which.

Bulk files buffer rows for their next row group (Parquet), stripe (ORC) or block (Avro). The
task bounds the total: after each record batch, while the buffers of all its open files hold
more than ``writeBufferSize`` bytes, the largest is written out early (ORC: its file rolls).
"""

from __future__ import annotations

import time

import pyarrow as pa

from sparklink.errors import naming_path
from sparklink.faults import fault_point
from sparklink.files.sink.bucket_assigners import BucketAssigner
from sparklink.files.sink.output_file_config import OutputFileConfig
from sparklink.files.sink.part_files import (
    IN_PROGRESS,
    PENDING,
    PartFile,
    finished_name,
    in_progress_name,
    job_tag,
    job_writer_uid,
    new_writer_uid,
    relative,
    stream_tag,
)
from sparklink.files.sink.rolling_policies import RollingPolicy
from sparklink.formats.base import BulkWriter, RowEncoder
from sparklink.formats.config import FormatConfig
from sparklink.sink.writer import Committable, SinkWriter, WriterContext
from sparklink.storage.output import OutputStorage
from sparklink.storage.recoverable import PartStream, RecoverableWriter


class _OpenPart:
    """One open part file of one bucket (row or bulk) and its stream on the part-file seam."""

    def __init__(self, record: PartFile, stream: PartStream, name: str):
        self.record = record
        self.stream = stream
        self.path = name  # the file's path or URI, for errors
        self.bulk: BulkWriter | None = None

    @property
    def size(self) -> int:
        if self.bulk is not None:
            return self.bulk.size()
        return self.record.length

    def close(self) -> None:
        """The file is pending: its bytes are durable, the record says how many."""
        with naming_path(self.path):
            if self.bulk is not None:
                self.bulk.close()
                self.bulk = None
            self.stream.close()

    def discard_handles(self) -> None:
        self.stream.discard()
        if self.bulk is not None:
            try:
                self.bulk.close()
            except (OSError, ValueError):
                pass  # the file is removed, cut back or aborted right after; its content no longer matters
            self.bulk = None


class FileSinkWriter(SinkWriter):
    """Executor side: stages one task's rows in hidden part files, bucket by bucket."""

    def __init__(self, *, output: OutputStorage, context: WriterContext, format_config: FormatConfig,
                 assigner: BucketAssigner, rolling_policy: RollingPolicy, output_config: OutputFileConfig,
                 carried: dict[str, PartFile], carry: bool):
        self.part_files: RecoverableWriter = output.part_files()
        self.context = context
        self.format = format_config
        self.assigner = assigner
        self.policy = rolling_policy
        self.output = output_config
        self.carried = dict(carried)
        self.carry = carry
        self.uid = new_writer_uid() if context.streaming else job_writer_uid(context.job_id)
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
        """A new part file of ``bucket``; or, for row formats, the continuation of the file the
        last commit carries for this bucket and partition."""
        base = self.carried.pop(bucket, None)
        if base is not None and not self.format.bulk:
            return self._continue(base, now)
        record = self._new_record(bucket, now)
        name = self.part_files.storage.uri(record.path)
        with naming_path(name):
            part = _OpenPart(record, self.part_files.open(record), name)
            if self.format.bulk:
                part.bulk = self.format.bulk_writer(part.stream.bulk_target(), schema)
            else:
                header = self._encoder(schema).header()
                part.stream.write(header)
                part.record.length = len(header)
        return part

    def _continue(self, base: PartFile, now: float) -> _OpenPart:
        """Continue a carried in-progress file at its committed length: in place where the
        store allows this attempt to, else in a copy under a new name."""
        attempt = self.context.attempt_number
        if self.part_files.resumes_in_place(attempt):
            record = PartFile(**{**base.__dict__, "extra": dict(base.extra)})
            record.in_place = True
        else:
            record = self._new_record(base.bucket, now)
            record.created_at, record.rows, record.in_place = base.created_at, base.rows, False
        record.base_path, record.base_length = base.path, base.length
        name = self.part_files.storage.uri(base.path)
        with naming_path(name):
            part = _OpenPart(record, self.part_files.resume(record, base, attempt=attempt), name)
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
                assert part.bulk is not None  # a bulk format's open file always has its writer
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
            writer = self.open[bucket].bulk
            if writer is not None and not writer.release():
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

    def _append(self, bucket: str, part: _OpenPart, data: bytes | memoryview, count: int, now: float) -> None:
        part.stream.write(data)
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
            if self.carry:  # the file goes on in the next micro-batch's task
                part = self.open.pop(bucket)
                with naming_path(part.path):
                    part.stream.persist(self.uid)
                part.record.state = IN_PROGRESS
                self.done.append(part)
            else:
                self._roll(bucket)

    def prepare_commit(self) -> list[Committable]:
        fault_point("filesink.writer.before_commit", batch_id=self.context.batch_id, attempt=self.context.attempt_number)
        return [part.record.to_json() for part in self.done]

    def abort(self) -> None:
        """Drop this attempt's new files; carried files stay as their last commit left them."""
        for part in list(self.open.values()) + self.done:
            part.discard_handles()
            self.part_files.abort(part.record)
        self.open.clear()
        self.done.clear()

    def close(self) -> None:
        for part in self.open.values():
            part.discard_handles()
