"""The file source reading S3 prefixes (SeaweedFS started by the session's ``s3_server``).

Every format is read from objects through ranged GETs (with compression, hive partitions,
hidden names and the glob); large objects are cut into byte-range and row-group splits; a
stream over objects that keep arriving reads each once across several triggers, with
``maxFilesPerTrigger`` / ``maxBytesPerTrigger`` / ``Trigger.AvailableNow``, including objects
that appear with a ``LastModified`` older than files already read; the output of the sparklink
file sink on S3 shows only its committed files; and one driver is SIGKILLed after its sink
committed and before Spark's commit (a crash simulated in the test's session: the query fails
there and a new query restarts from the checkpoint, as after a driver's death), and every record
is read exactly once.

SeaweedFS stamps a completed multipart upload with the time of its completion (AWS S3 with the
time the upload was *initiated*), so an object that becomes visible with an old
``LastModified`` is made here by SeaweedFS's own atomic rename (its filer's ``mv.from``), which
keeps the object's time: the case the offsets' ``recent`` files exist for.
"""

from __future__ import annotations

import gzip
import io
import json
import threading
import time
import urllib.request
from collections import Counter
from pathlib import Path

import fastavro
import pyarrow as pa
import pyarrow.orc as orc
import pyarrow.parquet as pq
import pytest

from sparklink.errors import ConfigError
from sparklink.files.source.config import FileSourceConfig
from sparklink.files.source.enumerator import FileSplitEnumerator
from sparklink.files.source.listing import list_sorted
from sparklink.files.source.listing_choice import load_enumerator
from sparklink.files.source.position import FilePosition
from sparklink.source import READ_ALL, ReadLimit
from tests.files.jobs_source import committed_ids, stream_to_directory

ROWS_PER_FILE = 5
LATE_IDS = range(1_000_000, 1_000_005)       # the object renamed in with an old LastModified
MULTIPART_IDS = range(2_000_000, 2_000_005)  # the multipart upload completed late


@pytest.fixture(scope="module")
def s3_client(s3_server):
    """A plain S3 client of the server for this module (a boto3 client costs ~0.2 s)."""
    return s3_server.client()


def _filer_url(s3_server) -> str:
    port = next(arg.split("=", 1)[1] for arg in s3_server.process.args if arg.startswith("-filer.port="))
    return f"http://127.0.0.1:{port}"


def _rename(s3_server, bucket: str, source_key: str, target_key: str) -> None:
    """SeaweedFS's atomic rename: the object appears under ``target_key`` keeping its old
    LastModified (as an AWS multipart upload appears with the time it was initiated)."""
    request = urllib.request.Request(f"{_filer_url(s3_server)}/buckets/{bucket}/{target_key}"
                                     f"?mv.from=/buckets/{bucket}/{source_key}", method="POST")
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.status in (200, 204), response.read()


def _csv(ids) -> bytes:
    return "".join(f"{i},payload-{i}\n" for i in ids).encode()


def _last_modified(client, bucket: str, key: str) -> float:
    return client.head_object(Bucket=bucket, Key=key)["LastModified"].timestamp()


# ---------------------------------------------------------------------------- every format


def _encoded(fmt: str, ids: list[int]) -> bytes:
    table = pa.table({"id": pa.array(ids, pa.int64()), "payload": [f"p{i}" for i in ids]})
    if fmt == "text":
        return "".join(f"{i}\n" for i in ids).encode()
    if fmt == "csv":
        return _csv(ids)
    if fmt == "json":
        return "".join(json.dumps({"id": i, "payload": f"p{i}"}) + "\n" for i in ids).encode()
    sink = io.BytesIO()
    if fmt == "parquet":
        pq.write_table(table, sink)
    elif fmt == "avro":
        schema = {"type": "record", "name": "r", "fields": [{"name": "id", "type": "long"},
                                                            {"name": "payload", "type": "string"}]}
        fastavro.writer(sink, schema, table.to_pylist())
    else:
        orc.write_table(table, sink)
    return sink.getvalue()


def _zstd(data: bytes) -> bytes:
    buffer = pa.BufferOutputStream()
    with pa.CompressedOutputStream(buffer, "zstd") as stream:
        stream.write(data)
    return buffer.getvalue().to_pybytes()


FORMATS = ("text", "csv", "json", "parquet", "avro", "orc")
SCHEMAS = {"text": None, "csv": "id long, payload string, day long", "json": "id long, payload string, day long"}


def test_every_format_is_read_from_s3_with_partitions_compression_and_hidden_names(spark, s3_server, s3_bucket,
                                                                                   s3_client):
    """spark.read of each format under ``day=N`` prefixes (schemas of Parquet, Avro and ORC
    inferred from the objects); gzip / zstd objects decompressed; hidden keys (``_x/``,
    ``.x``), temporary suffixes and directory markers skipped; ``pathGlobFilter`` applied."""
    for fmt in FORMATS:
        ext = "txt" if fmt == "text" else fmt
        objects = {f"{fmt}/day=1/a.{ext}": _encoded(fmt, [1, 2]), f"{fmt}/day=2/b.{ext}": _encoded(fmt, [3]),
                   f"{fmt}/day=1/_sparklink/c.{ext}": _encoded(fmt, [90]), f"{fmt}/.d.{ext}": _encoded(fmt, [91]),
                   f"{fmt}/day=2/e.{ext}.tmp": _encoded(fmt, [92]), f"{fmt}/day=3/": b"",
                   f"{fmt}/day=2/skip.other": b"not read"}
        if fmt in ("text", "csv", "json"):  # compressed text objects, decompressed by their suffix
            objects[f"{fmt}/day=3/f.{ext}.gz"] = gzip.compress(_encoded(fmt, [4]))
            objects[f"{fmt}/day=3/g.{ext}.zst"] = _zstd(_encoded(fmt, [5]))
        for key, body in objects.items():
            s3_client.put_object(Bucket=s3_bucket, Key=key, Body=body)
        reader = (spark.read.format("sparklink.files").options(**s3_server.options())
                  .option("path", f"s3a://{s3_bucket}/{fmt}").option("format", fmt)
                  .option("pathGlobFilter", f"*.{ext}*"))
        if SCHEMAS.get(fmt):
            reader = reader.schema(SCHEMAS[fmt])
        rows = reader.load().collect()
        expected = [(1, 1), (2, 1), (3, 2)] + ([(4, 3), (5, 3)] if fmt in ("text", "csv", "json") else [])
        key = "value" if fmt == "text" else "id"
        assert sorted((int(r[key]), r["day"]) for r in rows) == expected, fmt


def test_large_objects_are_cut_into_byte_range_and_row_group_splits(spark, s3_server, s3_bucket, s3_client):
    """A 20,000-row CSV object and a Parquet object of 20 row groups, read with a 64 KB split
    size: several splits each (line-aligned byte ranges by ranged GETs, row-group ranges from the
    footer), every row once."""
    rows = 20_000
    s3_client.put_object(Bucket=s3_bucket, Key="big/csv/big.csv", Body=_csv(range(rows)))
    table = pa.table({"id": pa.array(range(rows), pa.int64()), "payload": [f"payload-{i}" for i in range(rows)]})
    sink = io.BytesIO()
    pq.write_table(table, sink, row_group_size=1000)
    s3_client.put_object(Bucket=s3_bucket, Key="big/parquet/big.parquet", Body=sink.getvalue())
    for fmt, schema in (("csv", "id long, payload string"), ("parquet", None)):
        options = {"path": f"s3://{s3_bucket}/big/{fmt}", "format": fmt, "maxSplitBytes": "64KB",
                   **s3_server.options()}
        splits = FileSplitEnumerator(FileSourceConfig.from_options(options), streaming=False).plan_splits(
            FilePosition(ts=-1).to_offset(), FilePosition(ts=1 << 62).to_offset())
        units = {segment["unit"] for split in splits for segment in split.state["segments"]}
        assert len(splits) >= 4 and units == {"bytes" if fmt == "csv" else "row_groups"}, (fmt, len(splits), units)
        reader = spark.read.format("sparklink.files").options(**options)
        ids = [r["id"] for r in (reader.schema(schema) if schema else reader).load().select("id").collect()]
        assert len(ids) == rows and sorted(ids) == list(range(rows)), fmt
    # a path naming one object lists that object; an empty prefix lists nothing (no error: S3 has no directories)
    enumerator = load_enumerator(None, FileSourceConfig.from_options(options))
    one, empty = f"s3://{s3_bucket}/big/csv/big.csv", f"s3://{s3_bucket}/nothing/here"
    assert [(f.path, f.size) for f in list_sorted(enumerator, [one, empty], None)] == [(one, len(_csv(range(rows))))]


# ---------------------------------------------------------------------------- streams


def _available_now(spark, options: dict, out: Path, checkpoint: Path) -> list[int]:
    """One Trigger.AvailableNow run into the transactional directory sink: rows per micro-batch."""
    frame = (spark.readStream.format("sparklink.files").options(**options).schema("id long, payload string").load())
    query = (frame.writeStream.format("sparklink.directory").option("path", str(out))
             .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    query.awaitTermination()
    return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]


def _last_offset(checkpoint: Path) -> dict:
    offsets = checkpoint / "offsets"
    last = max((p for p in offsets.iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
    return json.loads(last.read_text().splitlines()[-1])


def test_arriving_objects_are_read_once_over_triggers_with_rate_limits_and_late_objects(spark, s3_server, s3_bucket,
                                                                                        s3_client, tmp_path):
    """Three availableNow runs on one checkpoint, objects landing between them:

    * run 1 (maxFilesPerTrigger=2): four objects in two micro-batches; meanwhile a multipart
      upload (initiated before) is still open and an object waits outside the prefix;
    * the upload is completed and the waiting object is renamed in: it appears with a
      LastModified *older* than the objects run 1 read (a position in the reading order alone
      would skip it); two more objects land;
    * run 2 (maxBytesPerTrigger=1: one object per micro-batch) reads the four, each once; its
      offset remembers the objects read within maxVisibilityDelay;
    * run 3 with maxVisibilityDelay=0: one more object; the offset's watermark passes every
      object and remembers none (the state is bounded by that window).
    """
    out, ck = tmp_path / "out", tmp_path / "ck"
    options = {"path": f"s3://{s3_bucket}/in", "format": "csv", "minFileAge": "0", **s3_server.options()}

    def put(index: int) -> str:
        key = f"in/f-{index:03d}.csv"
        s3_client.put_object(Bucket=s3_bucket, Key=key, Body=_csv(range(index * 5, index * 5 + 5)))
        return key

    s3_client.put_object(Bucket=s3_bucket, Key="staging/late.csv", Body=_csv(LATE_IDS))
    upload = s3_client.create_multipart_upload(Bucket=s3_bucket, Key="in/multipart.csv")["UploadId"]
    part = s3_client.upload_part(Bucket=s3_bucket, Key="in/multipart.csv", UploadId=upload, PartNumber=1,
                                 Body=_csv(MULTIPART_IDS))
    time.sleep(1.1)  # LastModified has a resolution of 1 s: the next objects are strictly newer
    first = [put(i) for i in range(4)]
    assert _available_now(spark, dict(options, maxFilesPerTrigger="2"), out, ck) == [10, 10]

    s3_client.complete_multipart_upload(Bucket=s3_bucket, Key="in/multipart.csv", UploadId=upload,
                                        MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": part["ETag"]}]})
    _rename(s3_server, s3_bucket, "staging/late.csv", "in/late.csv")
    assert _last_modified(s3_client, s3_bucket, "in/late.csv") < max(
        _last_modified(s3_client, s3_bucket, key) for key in first)  # older than what run 1 read
    put(4), put(5)
    assert _available_now(spark, dict(options, maxBytesPerTrigger="1"), out, ck) == [5, 5, 5, 5]
    recent = [path for _, path in _last_offset(ck)["recent"]]
    assert f"s3://{s3_bucket}/in/late.csv" in recent and len(recent) == 8  # every object, within 10 min

    put(6)
    time.sleep(2.1)  # every object is now older than the horizon's 2 s clock margin
    assert _available_now(spark, dict(options, maxVisibilityDelay="0s"), out, ck) == [5]
    assert "recent" not in _last_offset(ck)  # the watermark passed every object: none is remembered
    counts = Counter(committed_ids(out))
    assert sorted(counts) == list(range(35)) + list(LATE_IDS) + list(MULTIPART_IDS)
    assert set(counts.values()) == {1}


def test_admission_never_lets_the_watermark_pass_an_object_left_out(s3_server, s3_bucket, s3_client):
    """The enumerator alone (driver side, no Spark): a rate limit leaves objects out; the
    watermark stays below the first one left out, and the objects taken above it are
    remembered; a trigger with nothing new keeps the offset (no empty micro-batch)."""
    for index in range(3):
        s3_client.put_object(Bucket=s3_bucket, Key=f"in/f-{index}.csv", Body=_csv([index]))
    time.sleep(1.1)  # LastModified is truncated to the second: now every object is older than minFileAge=0's margin
    config = FileSourceConfig.from_options({"path": f"s3://{s3_bucket}/in", "format": "csv", "minFileAge": "0",
                                            "maxVisibilityDelay": "0s", **s3_server.options()})
    enumerator = FileSplitEnumerator(config, streaming=True)
    requests: Counter = Counter()
    client = config.s3.shared_client()  # the driver's client: count what each trigger asks the store
    def count(model, **_):
        requests.update([model.name])

    client.meta.events.register("before-call.s3", count)
    start = enumerator.initial_offset()
    try:
        first = FilePosition.from_offset(enumerator.latest_offset(start, ReadLimit(max_files=1)))
    finally:
        client.meta.events.unregister("before-call.s3", count)
    assert requests == {"ListObjectsV2": 1}  # one trigger over fewer than 1,000 keys: one request
    listed = sorted(enumerator._listing)
    assert first.covers(listed[0].sort_key) and not any(first.covers(f.sort_key) for f in listed[1:])
    rest = FilePosition.from_offset(enumerator.latest_offset(first.to_offset(), READ_ALL))
    assert all(rest.covers(f.sort_key) for f in listed)
    assert FilePosition.from_offset(enumerator.latest_offset(rest.to_offset(), READ_ALL)) == rest
    planned = enumerator.plan_splits(first.to_offset(), rest.to_offset())  # as a replay in a new process plans it
    assert sorted(seg["path"] for split in planned for seg in split.state["segments"]) == [f.path for f in listed[1:]]


def test_incremental_listing_starts_after_the_settled_key_and_a_replay_lists_whole(s3_server, s3_bucket, s3_client,
                                                                                    tmp_path):
    """``useIncrementalListing``: once every object up to a key is read and was first listed a
    settle time ago (``maxVisibilityDelay`` 0 s plus the 2 s clock margin), the next listing
    starts after it (``StartAfter``) and still finds the new object; planning an older batch
    (a replay) lists the whole prefix. On a local path the option is refused, naming it."""
    for index in range(2):
        s3_client.put_object(Bucket=s3_bucket, Key=f"inc/a-{index}.csv", Body=_csv([index]))
    time.sleep(1.1)  # LastModified is truncated to the second
    config = FileSourceConfig.from_options({"path": f"s3://{s3_bucket}/inc", "format": "csv", "minFileAge": "0",
                                            "maxVisibilityDelay": "0s", "useIncrementalListing": "true",
                                            **s3_server.options()})
    enumerator = FileSplitEnumerator(config, streaming=True)
    start_afters: list = []
    client = config.s3.shared_client()

    def record(params, **_):
        start_afters.append(params.get("StartAfter"))

    client.meta.events.register("before-parameter-build.s3.ListObjectsV2", record)
    try:
        start = enumerator.initial_offset()
        first = FilePosition.from_offset(enumerator.latest_offset(start, READ_ALL))
        time.sleep(2.1)  # the settle time has passed since both objects were first listed
        assert FilePosition.from_offset(enumerator.latest_offset(first.to_offset(), READ_ALL)) == first
        s3_client.put_object(Bucket=s3_bucket, Key="inc/a-2.csv", Body=_csv([2]))
        time.sleep(1.1)
        second = FilePosition.from_offset(enumerator.latest_offset(first.to_offset(), READ_ALL))
        replay = enumerator.plan_splits(start, second.to_offset())
    finally:
        client.meta.events.unregister("before-parameter-build.s3.ListObjectsV2", record)
    assert start_afters == [None, None, "inc/a-1.csv", None]
    uri = f"s3://{s3_bucket}/inc/a-"
    assert second.covers(next(f.sort_key for f in enumerator._listing if f.path == f"{uri}2.csv"))
    assert sorted(seg["path"] for split in replay for seg in split.state["segments"]) == [f"{uri}{i}.csv"
                                                                                         for i in range(3)]
    with pytest.raises(ConfigError, match="useIncrementalListing"):
        FileSourceConfig.from_options({"path": str(tmp_path), "format": "csv", "useIncrementalListing": "true"})


# ---------------------------------------------------------------------------- the sink's output


def test_the_sparklink_sink_output_on_s3_shows_only_committed_files(spark, s3_server, s3_bucket, s3_client):
    """A batch committed by the file sink on S3 and a later one staged but not committed (its
    part file an open multipart upload, its metadata under ``_sparklink/``): the source reads
    exactly the committed rows."""
    from sparklink.files.sink.connector import FileSinkConnector
    from sparklink.sink.protocol import commit_batch
    from sparklink.testing.conformance.outputs import SEQUENCE_SCHEMA
    from sparklink.testing.conformance.sinks import write_attempt

    sink = FileSinkConnector({"path": f"s3://{s3_bucket}/out", "format": "parquet", "bucketAssigner": "basepath",
                              **s3_server.options()}, SEQUENCE_SCHEMA)
    assert commit_batch(sink, 0, "job-0", write_attempt(sink, 0, 0, 0, [1, 2, 3], "job-0"), ["q1"])
    write_attempt(sink, 1, 0, 0, [4, 5], "job-1")  # staged, never committed
    keys = [item["Key"] for item in s3_client.list_objects_v2(Bucket=s3_bucket, Prefix="out/")["Contents"]]
    assert any(k.startswith("out/_sparklink/") for k in keys)  # the sink's metadata is there, hidden
    assert s3_client.list_multipart_uploads(Bucket=s3_bucket, Prefix="out/").get("Uploads")  # the staged file
    frame = spark.read.format("sparklink.files").options(**s3_server.options()) \
        .option("path", f"s3://{s3_bucket}/out").option("format", "parquet").load()
    assert sorted(r["id"] for r in frame.select("id").collect()) == [1, 2, 3]


def _log_line(uri: str, size: int, time_ms: int) -> str:
    return json.dumps({"path": uri, "size": size, "isDir": False, "modificationTime": time_ms,
                       "blockReplication": 1, "blockSize": 33554432, "action": "add"})


def test_a_spark_sink_log_on_s3_is_read_through_and_a_stray_object_ignored(spark, s3_server, s3_bucket, s3_client):
    """An output as Spark's file sink writes it through S3A: data objects under their final
    names, ``_spark_metadata/<n>`` naming them by ``s3a://`` URI. The source (reading it as
    ``s3://``) reads exactly the files the log names: a visible object no batch names (a
    failed attempt's) is ignored, in a batch read and in a stream; a second path beside it is refused."""
    bodies = {f"spark/k=a/part-{i}.csv": _csv([i]) for i in range(3)}
    for key, body in bodies.items():
        s3_client.put_object(Bucket=s3_bucket, Key=key, Body=body)
    s3_client.put_object(Bucket=s3_bucket, Key="spark/k=a/part-9.csv", Body=_csv([9]))  # stray: never logged
    for batch, i in enumerate((0, 1)):
        key = f"spark/k=a/part-{i}.csv"
        line = _log_line(f"s3a://{s3_bucket}/{key}", len(bodies[key]), 1_000 + batch)
        s3_client.put_object(Bucket=s3_bucket, Key=f"spark/_spark_metadata/{batch}", Body=f"v1\n{line}".encode())
    reader = spark.read.format("sparklink.files").options(**s3_server.options()).option("format", "csv") \
        .schema("id long, payload string")
    frame = reader.option("path", f"s3://{s3_bucket}/spark").load()
    assert sorted(r["id"] for r in frame.collect()) == [0, 1]
    with pytest.raises(Exception, match="single path"):
        reader.option("path", f"s3://{s3_bucket}/spark") \
            .option("paths", json.dumps([f"s3://{s3_bucket}/other"])).load().collect()
    config = FileSourceConfig.from_options({"path": f"s3://{s3_bucket}/spark", "format": "csv", **s3_server.options()})
    enumerator = load_enumerator(None, config)
    listed = list_sorted(enumerator, config.paths, None)
    assert [f.path.rpartition("/")[2] for f in listed] == ["part-0.csv", "part-1.csv"]
    assert [f.size for f in listed] == [len(bodies[f"spark/k=a/part-{i}.csv"]) for i in (0, 1)]


# ---------------------------------------------------------------------------- a real kill


class _Uploader(threading.Thread):
    """Uploads a new CSV object every 50 ms while a driver runs. Before it starts, it opens a
    multipart upload in the prefix and puts an object outside it (both land later: ``land_late``)."""

    def __init__(self, s3_server, client, bucket: str, first: int):
        super().__init__(daemon=True)
        self.server, self.client, self.bucket = s3_server, client, bucket
        self.next, self.stopped = first, threading.Event()
        self.upload = client.create_multipart_upload(Bucket=bucket, Key="in/multipart.csv")["UploadId"]
        self.part = client.upload_part(Bucket=bucket, Key="in/multipart.csv", UploadId=self.upload, PartNumber=1,
                                       Body=_csv(MULTIPART_IDS))
        client.put_object(Bucket=bucket, Key="staging/late.csv", Body=_csv(LATE_IDS))

    def put(self, index: int) -> None:
        self.client.put_object(Bucket=self.bucket, Key=f"in/f-{index:05d}.csv",
                               Body=_csv(range(index * ROWS_PER_FILE, (index + 1) * ROWS_PER_FILE)))

    def run(self) -> None:
        while not self.stopped.wait(0.05):
            self.put(self.next)
            self.next += 1

    def land_late(self) -> None:
        """Complete the upload, and rename the old object in: it appears with a LastModified
        older than objects the killed driver's logged batch read."""
        self.client.complete_multipart_upload(Bucket=self.bucket, Key="in/multipart.csv", UploadId=self.upload,
                                              MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": self.part["ETag"]}]})
        _rename(self.server, self.bucket, "staging/late.csv", "in/late.csv")

    def stop(self) -> int:
        self.stopped.set()
        self.join()
        return self.next


def test_crash_after_the_sink_commit_while_objects_arrive(armed, spark, s3_server, s3_bucket, s3_client, tmp_path):
    """A streaming query reading S3 crashes after its sink committed a micro-batch and before
    Spark's commit (the micro-batch is replayed from its logged offsets, with their ``recent``
    objects, by the next query), while objects keep arriving; the last run drains everything:
    every row exactly once, the late objects included. The crash is simulated in the test's
    session (the fault point raises; what Spark and S3 hold is what a killed driver leaves): the
    file family's real driver SIGKILLs are tests/files/test_file_source_exactly_once.py's (this
    source's replay on local disk) and, on S3, TestFileSinkJsonCarried[s3]'s."""
    from sparklink.testing import error_text

    out, ck = tmp_path / "out", tmp_path / "ck"
    src = f"s3://{s3_bucket}/in"
    uploader = _Uploader(s3_server, s3_client, s3_bucket, 4)
    time.sleep(1.1)  # LastModified has a resolution of 1 s: the next objects are strictly newer
    for index in range(4):
        uploader.put(index)
    uploader.start()
    try:
        with armed("sink.after_commit:raise", once_marker=str(tmp_path / "fired")), \
                pytest.raises(Exception) as crashed:
            stream_to_directory(spark, src=src, out=str(out), checkpoint=str(ck), available_now=False,
                                options=s3_server.options())
        assert "sink.after_commit" in error_text(crashed.value), error_text(crashed.value)[-3000:]
    finally:
        total = uploader.stop()
    uploader.land_late()  # after the logged batch 0 was listed: the renamed object is older than its objects
    stream_to_directory(spark, src=src, out=str(out), checkpoint=str(ck), max_files=1000,
                        options=s3_server.options())
    counts = Counter(committed_ids(out))
    duplicates = {i: c for i, c in counts.items() if c > 1}
    assert not duplicates, f"duplicated ids: {sorted(duplicates)[:10]}"
    expected = list(range(total * ROWS_PER_FILE)) + list(LATE_IDS) + list(MULTIPART_IDS)
    assert sorted(counts) == sorted(expected), f"missing: {sorted(set(expected) - set(counts))[:10]}"


# ---------------------------------------------------------------------------- prefetching in a task


def test_a_split_of_small_objects_is_fetched_ahead_within_its_bounds_and_read_as_before(s3_server, s3_bucket,
                                                                                        s3_client):
    """Spark-free: a split's small objects are fetched whole ahead of the reader, never more
    bytes ahead than the bound (one object at least); a larger object is left to the format's
    ranged GETs; a segment the reader skips is dropped; a fetch that fails (the object deleted
    since the listing) is not served, so the format reports the missing file as without
    prefetching (or skips it with ignoreMissingFiles)."""
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    from sparklink.errors import DataError
    from sparklink.files.source.prefetch import ObjectPrefetch
    from sparklink.files.source.reader import FileSourceReader
    from sparklink.files.source.splits import Segment
    from sparklink.source import Split

    bodies = {f"pf/f{i}.csv": _csv(range(i * 10, i * 10 + 10)) for i in range(6)}
    for key, body in bodies.items():
        s3_client.put_object(Bucket=s3_bucket, Key=key, Body=body)
    paths = [f"s3://{s3_bucket}/{key}" for key in bodies]
    options = {"path": f"s3://{s3_bucket}/pf", "format": "csv", **s3_server.options()}
    config = FileSourceConfig.from_options(options)
    size = len(bodies["pf/f0.csv"])

    prefetch = ObjectPrefetch(config.s3, [(i, path, size) for i, path in enumerate(paths)], ahead_bytes=2 * size)
    try:
        assert prefetch._ahead <= 2 * size and len(prefetch._started) == 2  # the bound: two objects ahead
        assert prefetch.take(0).to_pybytes() == bodies["pf/f0.csv"]
        assert prefetch.take(2).to_pybytes() == bodies["pf/f2.csv"]  # segment 1 skipped: dropped
        s3_client.delete_object(Bucket=s3_bucket, Key="pf/f5.csv")
        assert prefetch.take(3) is not None and prefetch.take(4) is not None
        assert prefetch.take(5) is None  # gone: the format opens it itself and reports it
    finally:
        prefetch.close()

    schema = StructType([StructField("id", LongType()), StructField("payload", StringType())])
    split = Split(split_id="s-0", state={"segments": [Segment(path=p, size=size).to_state() for p in paths],
                                         "schema_file": None})
    with pytest.raises(DataError, match=r"f5\.csv: the file was listed but is gone"):
        list(FileSourceReader(config, schema).read(split))
    skipping = FileSourceConfig.from_options({**options, "ignoreMissingFiles": "true"})
    ids = [i for batch in FileSourceReader(skipping, schema).read(split) for i in batch.column(0).to_pylist()]
    assert ids == list(range(50))
    large = FileSourceReader(config, schema)._prefetch([Segment(path=paths[0], size=9 * 1024 * 1024)])
    assert large is None  # above SMALL_OBJECT_BYTES: read ahead of the decoder in blocks, as below


def test_a_large_object_is_read_in_blocks_ahead_of_the_reader(s3_server, s3_bucket, s3_client):
    """Spark-free: ReadAheadFile (large ORC and Avro objects) returns the object's bytes for any
    seek and read, and holds the blocks of the current read plus at most ``blocks`` after it,
    never past the object's end."""
    from sparklink.files.source.prefetch import ReadAhead
    from sparklink.storage import S3Location
    from sparklink.storage.file_input import reading_storage

    body = bytes(range(256)) * (3 * 4096 + 17)  # 3 MiB and a bit
    s3_client.put_object(Bucket=s3_bucket, Key="ra/big.bin", Body=body)
    config = FileSourceConfig.from_options({"path": f"s3://{s3_bucket}/ra", "format": "text",
                                            **s3_server.options()}).s3
    block = 256 * 1024
    bucket = reading_storage(S3Location(scheme="s3", bucket=s3_bucket, prefix=""), config)
    with ReadAhead(blocks=2, block_bytes=block).open(bucket.open_input("ra/big.bin")) as handle:
        assert handle.read(10) == body[:10] and sorted(handle._blocks) == [0, 1, 2]
        handle.seek(5 * block + 3)
        assert handle.read(2 * block) == body[5 * block + 3:7 * block + 3] and sorted(handle._blocks) == list(range(5, 10))
        handle.seek(-20, 2)
        assert handle.read() == body[-20:] and handle.read(5) == b""
        assert max(handle._blocks) == (len(body) - 1) // block  # no block past the end
        handle.seek(0)
        assert handle.read() == body


def test_ranges_of_row_groups_on_s3_read_their_own_rows_a_row_group_at_a_time(s3_server, s3_bucket, s3_client,
                                                                              tmp_path):
    """Spark-free: a large Parquet object cut into ranges of row groups is read by pyarrow's
    pre-buffering a row group at a time (no read-ahead file in between); each range yields
    exactly its rows, in order, so the ranges together yield the file once. A split state written
    by an earlier version, with the byte ``span`` of its row groups, still reads. Opening objects
    to read them builds no boto3 client (reads go through pyarrow's file system)."""
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    from sparklink.files.source.listing import FileStatus
    from sparklink.files.source.reader import FileSourceReader
    from sparklink.files.source.splits import segments_for
    from sparklink.source import Split
    from sparklink.storage import S3Location
    from sparklink.storage.file_input import reading_storage

    table = pa.table({"id": pa.array(range(40_000), pa.int64()),
                      "k": pa.array([f"key-{i * 7919 % 40_000}" for i in range(40_000)])})
    local = tmp_path / "groups.parquet"
    pq.write_table(table, local, row_group_size=5_000)
    s3_client.upload_file(str(local), s3_bucket, "rg/groups.parquet")
    config = FileSourceConfig.from_options({"path": f"s3://{s3_bucket}/rg", "format": "parquet",
                                            **s3_server.options()})
    size = local.stat().st_size
    status = FileStatus(arrival_ns=0, path=f"s3://{s3_bucket}/rg/groups.parquet", size=size)
    segments = segments_for(status, config, size // 3)
    assert len(segments) >= 3 and all(s.unit == "row_groups" for s in segments)
    reader = FileSourceReader(config, StructType([StructField("id", LongType()), StructField("k", StringType())]))
    assert reader._source(segments[0], 0, None) is None  # pyarrow fetches the row groups itself
    rows = []
    for number, segment in enumerate(segments):
        state = segment.to_state()
        assert "span" not in state
        if number == 0:
            state["span"] = [4, 1000]  # as the splits of earlier versions carry it
        split = Split(split_id=f"rg-{number}", state={"segments": [state], "schema_file": None})
        got = [i for batch in reader.read(split) for i in batch.column("id").to_pylist()]
        assert got == list(range(segment.start * 5_000, segment.end * 5_000))
        rows.extend(got)
    assert rows == list(range(40_000))
    opened = reading_storage(S3Location(scheme="s3", bucket=s3_bucket, prefix=""), config.s3)
    opened.open_input("rg/groups.parquet").close()
    assert opened._client is None



# ---------------------------------------------------------------------------- options


def test_s3_paths_and_settings_are_parsed_and_bad_combinations_refused(tmp_path):
    """Driver side, no store: S3 settings come with the source's options and never show the
    secret; mixing local and S3 paths, or S3-only options on local paths, is refused naming them."""
    from sparklink.errors import ConfigError

    config = FileSourceConfig.from_options({"paths": '["s3a://bucket/a/", "s3://other/b"]', "format": "csv",
                                            "s3.accessKeyId": "AKID", "s3.secretAccessKey": "SECRET-VALUE",
                                            "maxVisibilityDelay": "1h"})
    assert config.paths == ("s3a://bucket/a", "s3://other/b") and config.store.KEY_LISTING and config.store.READ_AHEAD
    assert config.max_visibility_delay == 3600.0 and "SECRET-VALUE" not in repr(config)
    for options, named in (({"paths": f'["{tmp_path}", "s3://bucket/a"]'}, "mixes local paths"),
                           ({"path": str(tmp_path), "s3.endpoint": "http://127.0.0.1:1"}, "s3.endpoint"),
                           ({"path": str(tmp_path), "maxVisibilityDelay": "1h"}, "maxVisibilityDelay"),
                           ({"path": "s3://bucket/a", "s3.allowUnconditionalWrites": "true"},
                            "s3.allowUnconditionalWrites")):
        with pytest.raises(ConfigError, match=named):
            FileSourceConfig.from_options({"format": "csv", **options})


def test_an_offset_with_recent_objects_round_trips_and_a_damaged_one_is_refused():
    from sparklink.errors import SplitError

    position = FilePosition(ts=5, path="", recent=((7, "s3://b/in/x.csv"),))
    again = FilePosition.from_offset(json.dumps(position.to_offset()))
    assert again == position and again.covers((7, "s3://b/in/x.csv")) and not again.covers((6, "s3://b/in/y.csv"))
    assert "recent" not in FilePosition(ts=5, path="/in/a.csv").to_offset()  # local offsets keep their form
    with pytest.raises(SplitError, match="'recent' is not a list of"):
        FilePosition.from_offset({"v": 1, "ts": 5, "path": "", "recent": [[7]]})
