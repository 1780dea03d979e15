"""The SDK's commit protocol with the commit log and the owner claim on S3 (SeaweedFS), run
directly as Spark's ``commit(messages, batchId)`` would, on the example directory sink whose
data stays local: the same protocol code as on local disk, through the storage seam. Also
counts the S3 requests the metadata costs per micro-batch."""

from __future__ import annotations

from collections import Counter

import pyarrow.dataset as ds
import pytest

from sparklink.errors import ConcurrentWriterError
from sparklink.examples.directory_sink import DirectorySink
from sparklink.examples.sequence_source import SCHEMA
from sparklink.storage import S3Config, S3Location
from sparklink.storage.directory import StorageDirectory, StorageFile
from sparklink.storage.s3 import S3Storage
from sparklink.sink.commit_log import STATE_COMMITTING, CommitLog, CommitLogEntry
from sparklink.sink.protocol import commit_batch
from sparklink.testing.conformance import write_attempt


class S3MetadataSink(DirectorySink):
    """The example directory sink with its commit log and owner claim under ``s3://bucket/meta``."""

    storage: S3Storage

    def commit_log_dir(self) -> StorageDirectory:
        return StorageDirectory(self.storage, "_sparklink/commits")

    def owner_lock_path(self) -> StorageFile:
        return StorageFile(StorageDirectory(self.storage, "_sparklink"), "owner.json")


@pytest.fixture
def sink(tmp_path, s3_server, s3_bucket) -> S3MetadataSink:
    sink = S3MetadataSink({"path": str(tmp_path / "out")}, SCHEMA)
    sink.storage = S3Storage(S3Location(scheme="s3", bucket=s3_bucket, prefix="meta"),
                             S3Config.from_options(s3_server.options()))
    return sink


def _stage(sink, batch_id, ids, job="job1"):
    return write_attempt(sink, batch_id, 0, 0, ids, job)


def _visible(sink):
    return sorted(ds.dataset(sink.root, format="parquet").to_table().column("id").to_pylist())


def test_commits_replays_and_old_batches_with_the_log_on_s3(sink):
    assert commit_batch(sink, 0, "job1", _stage(sink, 0, [1, 2]), ["q1"]) is True
    assert commit_batch(sink, 0, "job2", _stage(sink, 0, [1, 2], job="job2"), ["q1"]) is False  # a replay
    assert commit_batch(sink, 2, "job3", _stage(sink, 2, [5], job="job3"), ["q1"]) is True
    assert commit_batch(sink, 1, "job4", _stage(sink, 1, [4], job="job4"), ["q1"]) is False  # older than the last
    assert _visible(sink) == [1, 2, 5]
    assert sorted(o.key for o in sink.storage.list()) == \
        ["_sparklink/commits/0.json", "_sparklink/commits/2.json", "_sparklink/owner.json"]
    assert CommitLog(sink.commit_log_dir()).get("2").finished


def test_an_entry_left_committing_on_s3_rolls_forward(sink):
    first = _stage(sink, 0, [1, 2])
    CommitLog(sink.commit_log_dir()).create(CommitLogEntry(key="0", batch_id=0, state=STATE_COMMITTING,
                                                           committables=first))  # the driver died here
    commit_batch(sink, 1, "job2", _stage(sink, 1, [3], job="job2"), ["q1"])
    assert _visible(sink) == [1, 2, 3]
    assert CommitLog(sink.commit_log_dir()).get("0").finished


def test_a_second_query_is_refused_by_the_claim_on_s3(sink):
    commit_batch(sink, 0, "job1", _stage(sink, 0, [1]), ["q1"])
    with pytest.raises(ConcurrentWriterError, match=r"s3://.*/meta/_sparklink belongs to streaming query q1; query q2"):
        commit_batch(sink, 1, "job2", _stage(sink, 1, [2], job="job2"), ["q2"])
    assert _visible(sink) == [1]


def test_s3_requests_of_the_metadata_per_micro_batch(sink):
    """Steady state (owner claimed, earlier batches logged): the requests one commit makes to
    S3 for the sink's metadata. docs/object-stores.md quotes this count."""
    for batch in range(3):
        commit_batch(sink, batch, f"job{batch}", _stage(sink, batch, [batch], job=f"job{batch}"), ["q1"])
    requests: Counter[str] = Counter()
    sink.storage.client.meta.events.register("before-send.s3", lambda request, **_: requests.update([request.method]))
    commit_batch(sink, 3, "job3", _stage(sink, 3, [3], job="job3"), ["q1"])
    print(f"S3 requests of one micro-batch's metadata: {dict(requests)}")
    assert requests["PUT"] == 2  # the entry created (If-None-Match), then finished (If-Match)
    assert sum(requests.values()) <= 12, dict(requests)
