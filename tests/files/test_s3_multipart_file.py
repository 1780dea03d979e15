"""An in-progress part file on S3 (sparklink.storage.multipart_file) against SeaweedFS:
parts go up as data arrives, nothing is visible before the upload is completed, a carried file
keeps its tail under 5 MiB in a hidden object and continues the same upload, and a Parquet
file written by pyarrow through it reads back whole."""

from __future__ import annotations

import io

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sparklink.errors import StorageError
from sparklink.storage import S3Config, S3Location
from sparklink.storage.multipart_file import MultipartFile, MultipartRecord
from sparklink.storage.s3 import MIN_PART_SIZE, S3Storage

MIB = 1024 * 1024


@pytest.fixture
def s3(s3_server, s3_bucket) -> S3Storage:
    return S3Storage(S3Location(scheme="s3", bucket=s3_bucket, prefix="out"), S3Config.from_options(s3_server.options()))


def _bytes(size: int, seed: int = 0) -> bytes:
    return bytes((seed + i * 7) % 251 for i in range(256)) * (size // 256) + b"x" * (size % 256)


def test_parts_go_up_as_data_arrives_and_nothing_is_visible_before_complete(s3):
    data = _bytes(11 * MIB + 123)
    part = MultipartFile.create(s3, "b/.part-0.json.inprogress.s1", part_size=MIN_PART_SIZE)
    for start in range(0, len(data), 3 * MIB):
        part.write(data[start:start + 3 * MIB])
    # both full parts were handed to the background uploads while writing, the rest is buffered: the
    # writer holds one part's buffer, not the file
    assert len(part._in_flight) + len(part.record.parts) == 2 and len(part._buffer) == MIB + 123
    assert part.tell() == len(data)
    part.close()
    pending = part.pending()
    assert [p.size for p in pending.parts] == [5 * MIB, 5 * MIB, MIB + 123] and pending.size == len(data)
    assert list(s3.list()) == []  # pending: no reader sees anything
    assert s3.uploaded_bytes(pending.key, pending.upload_id) == len(data)  # ListParts (inspect's orphan sizes)
    assert s3.complete_upload(pending.key, pending.upload_id, pending.parts)
    assert s3.read(pending.key).data == data
    assert MultipartRecord.from_json(pending.to_json()) == pending


def test_a_part_that_fails_to_upload_in_the_background_fails_the_next_step_naming_the_file(s3):
    """The store refuses a part uploaded in the background (its upload was aborted behind the
    writer's back): the next write of a full part or the close raises the store's error naming
    the file, so no pending file lacks a part; the task's abandon still settles and aborts."""
    for step in ("write", "close"):
        part = MultipartFile.create(s3, f"b/.part-9-{step}.json.inprogress.s1", part_size=MIN_PART_SIZE)
        s3.abort_upload(part.record.key, part.record.upload_id)
        part.write(_bytes(5 * MIB))  # a full part: handed to the background, refused there
        with pytest.raises(StorageError, match=rf"UploadPart of s3://.*/out/b/\.part-9-{step}\.json\.inprogress"):
            if step == "write":
                part._in_flight[0].exception()  # the refusal is in; the next full part raises it
                part.write(_bytes(5 * MIB))
            else:
                part.close()
        part.abandon()
        assert part.closed and not part._in_flight and list(s3.pending_uploads("b/")) == []


def test_a_carried_file_keeps_its_tail_in_a_hidden_object_and_continues_the_upload(s3):
    first, second = _bytes(6 * MIB, 1), _bytes(2 * MIB, 2)
    part = MultipartFile.create(s3, "b/.part-1.json.inprogress.s1", part_size=MIN_PART_SIZE)
    part.write(first)
    carried = part.persist("b/.part-1.json.inprogress.s1.tail-0")
    assert [p.size for p in carried.parts] == [5 * MIB] and carried.tail_size == MIB and carried.size == len(first)
    part.write(b"lost: written after the commit recorded the file")  # a crashed attempt's bytes
    resumed = MultipartFile.resume(s3, MultipartRecord.from_json(carried.to_json()), part_size=MIN_PART_SIZE)
    assert resumed.tell() == len(first)
    resumed.write(second)
    resumed.close()
    done = resumed.pending()
    s3.complete_upload(done.key, done.upload_id, done.parts)
    assert s3.read(done.key).data == first + second
    assert s3.read(carried.tail_key).data == first[5 * MIB:]  # the committer deletes it once superseded


def test_a_missing_tail_object_is_named(s3):
    part = MultipartFile.create(s3, "p", part_size=MIN_PART_SIZE)
    part.write(b"abc")
    carried = part.persist("p.tail-0")
    s3.delete("p.tail-0")
    with pytest.raises(StorageError, match=r"tail object s3://.*/out/p.tail-0 of part file .* is missing, not the 3 bytes"):
        MultipartFile.resume(s3, carried)
    part.abandon()


def test_a_parquet_file_written_through_a_multipart_file_reads_back_whole(s3):
    table = pa.table({"id": pa.array(range(200_000), pa.int64()), "name": [f"n{i}" for i in range(200_000)]})
    part = MultipartFile.create(s3, "dt=1/.part-2.parquet.inprogress.s1", part_size=MIN_PART_SIZE)
    with pq.ParquetWriter(part, table.schema) as writer:
        for batch in table.to_batches(max_chunksize=50_000):
            writer.write_batch(batch)
    part.close()
    done = part.pending()
    s3.complete_upload(done.key, done.upload_id, done.parts)
    assert pq.read_table(io.BytesIO(s3.read(done.key).data)).equals(table)


def test_an_empty_file_completes_into_an_empty_object_and_an_abandoned_one_leaves_nothing(s3):
    empty = MultipartFile.create(s3, "empty", part_size=MIN_PART_SIZE)
    empty.close()
    done = empty.pending()
    s3.complete_upload(done.key, done.upload_id, done.parts)
    assert s3.read("empty").data == b""
    failed = MultipartFile.create(s3, "failed", part_size=MIN_PART_SIZE)
    failed.write(_bytes(MIN_PART_SIZE + 1))
    failed.abandon()
    assert list(s3.pending_uploads()) == [] and s3.info("failed") is None


def test_a_part_size_below_the_store_minimum_is_refused(s3):
    with pytest.raises(StorageError, match="below S3's minimum of 5242880 bytes"):
        MultipartFile(s3, MultipartRecord(key="k", upload_id="u"), part_size=MIN_PART_SIZE - 1)


def test_one_row_group_of_a_parquet_object_is_read_by_ranged_gets(s3):
    table = pa.table({"id": pa.array(range(30_000), pa.int64())})
    part = MultipartFile.create(s3, "rg.parquet", part_size=MIN_PART_SIZE)
    pq.write_table(table, part, row_group_size=10_000)
    part.close()
    done = part.pending()
    s3.complete_upload(done.key, done.upload_id, done.parts)
    parquet = pq.ParquetFile(s3.open_input("rg.parquet"))
    assert parquet.metadata.num_row_groups == 3
    assert parquet.read_row_group(1).column("id").to_pylist() == list(range(10_000, 20_000))
    with pytest.raises(FileNotFoundError):
        s3.open_input("missing.parquet")


def _count_requests(storage: S3Storage):
    """A Counter of the S3 operations ``storage``'s client sends from now on, and its undo."""
    from collections import Counter

    requests: Counter[str] = Counter()

    def count(model, **_):
        requests.update([model.name])

    storage.client.meta.events.register("before-call.s3", count)
    return requests, lambda: storage.client.meta.events.unregister("before-call.s3", count)


def test_an_object_over_the_copy_object_limit_is_copied_part_by_part(s3, monkeypatch):
    """Above S3's 5 GB limit of one CopyObject (lowered here to 1 MiB) a copy is a multipart
    upload of UploadPartCopy ranges of the part size, completed: the bytes are identical. A
    copy that fails half-way aborts its upload and leaves no object."""
    import sparklink.storage.s3 as s3_module

    monkeypatch.setattr(s3_module, "MAX_COPY_OBJECT_SIZE", MIB)
    data = _bytes(11 * MIB + 5, 3)
    s3.put("b/.part-2.json.inprogress.s1", data)
    requests, stop = _count_requests(s3)
    try:
        s3.copy("b/.part-2.json.inprogress.s1", "b/part-2.json", size=len(data), part_size=MIN_PART_SIZE)
    finally:
        stop()
    assert requests["UploadPartCopy"] == 3 and requests["CopyObject"] == 0, dict(requests)
    assert s3.read("b/part-2.json").data == data
    assert s3.info("b/part-2.json").version.endswith('-3"')  # one object of three parts
    with pytest.raises(StorageError, match="UploadPartCopy of s3://.*/out/b/part-3.json"):
        s3.copy("b/.part-3.json.inprogress.s1", "b/part-3.json", size=len(data), part_size=MIN_PART_SIZE)  # no source
    assert list(s3.pending_uploads()) == [] and s3.info("b/part-3.json") is None
    s3.put("b/.part-4.json.inprogress.s1", data[:MIB])
    requests, stop = _count_requests(s3)
    try:
        s3.copy("b/.part-4.json.inprogress.s1", "b/part-4.json", size=MIB, part_size=MIN_PART_SIZE)  # at the limit
    finally:
        stop()
    assert requests == {"CopyObject": 1} and s3.read("b/part-4.json").data == data[:MIB]
