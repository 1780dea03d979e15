"""The sink's metadata on S3 (SeaweedFS): the commit log, the file sink's state files and the
owner claim run on the same code as on local disk, through the storage seam, with conditional
writes: a second writer can neither create an entry that exists nor overwrite one it did not
read last, and a second query cannot claim the output."""

from __future__ import annotations

import pytest

from sparklink.errors import ConcurrentWriterError, MetadataError
from sparklink.files.sink.state import SinkState, StateStore
from sparklink.storage import S3Config, S3Location
from sparklink.storage.directory import StorageDirectory, StorageFile
from sparklink.storage.s3 import S3Storage
from sparklink.sink.commit_log import STATE_COMMITTING, STATE_FINISHED, CommitLog, CommitLogEntry, OwnerLock


@pytest.fixture
def meta(s3_server, s3_bucket) -> S3Storage:
    """The output's storage: ``s3://<bucket>/out``."""
    return S3Storage(S3Location(scheme="s3", bucket=s3_bucket, prefix="out"), S3Config.from_options(s3_server.options()))


def _entry(key: str, state: str = STATE_COMMITTING) -> CommitLogEntry:
    return CommitLogEntry(key=key, batch_id=int(key), state=state, committables=[{"path": f"part-{key}"}])


def test_commit_log_on_s3_round_trips_and_lists_its_batches(meta):
    log = CommitLog(StorageDirectory(meta, "_sparklink/commits"))
    assert log.batch_ids() == [] and log.latest_batch_entry() is None
    for batch in (0, 1, 2):
        entry = _entry(str(batch))
        log.create(entry)
        entry.state = STATE_FINISHED
        log.put(entry)
    log.create(_entry("3"))
    assert log.batch_ids() == [0, 1, 2, 3]
    assert [e.key for e in log.unfinished()] == ["3"]
    assert log.get("2").finished and log.get("2").committables == [{"path": "part-2"}]
    log.purge_batches_before(2)
    assert log.batch_ids() == [2, 3]
    # open/_markers: the log says it keeps a marker per open job entry (written by the first unfinished())
    assert sorted(o.key for o in meta.list()) == ["_sparklink/commits/2.json", "_sparklink/commits/3.json",
                                                  "_sparklink/commits/open/_markers"]


def test_a_second_writer_cannot_create_an_entry_that_exists(meta):
    mine, other = (CommitLog(StorageDirectory(meta, "_sparklink/commits")) for _ in range(2))
    assert other.get("5") is None
    mine.create(_entry("5"))
    with pytest.raises(ConcurrentWriterError, match=r"s3://.*/out/_sparklink/commits/5.json was written by another"):
        other.create(_entry("5"))
    assert mine.get("5").committables == [{"path": "part-5"}]


def test_an_entry_is_rewritten_only_at_the_version_this_log_last_saw(meta):
    mine, other = (CommitLog(StorageDirectory(meta, "_sparklink/commits")) for _ in range(2))
    mine.create(_entry("7"))
    stale = other.get("7")
    finished = _entry("7", STATE_FINISHED)
    mine.put(finished)  # If-Match on the ETag mine created
    stale.committables = [{"path": "someone-else"}]
    with pytest.raises(ConcurrentWriterError, match="changed by another writer since this query read it"):
        other.put(stale)  # If-Match on an ETag that is no longer current: 412
    assert CommitLog(StorageDirectory(meta, "_sparklink/commits")).get("7").finished


def test_a_damaged_entry_on_s3_is_named_by_its_uri(meta):
    meta.put("_sparklink/commits/4.json", b"{not json")
    with pytest.raises(MetadataError, match=r"commit log entry s3://.*/out/_sparklink/commits/4.json is not valid JSON"):
        CommitLog(StorageDirectory(meta, "_sparklink/commits")).get("4")


def test_owner_claim_on_s3_refuses_a_second_query(meta):
    directory = StorageDirectory(meta, "_sparklink")
    lock = OwnerLock(StorageFile(directory, "owner.json"), location_for_messages=meta.location.uri())
    assert lock.owner() is None
    lock.claim("query-a")
    lock.claim("query-a")  # a restart of the same query
    with pytest.raises(ConcurrentWriterError, match=r"belongs to streaming query query-a; query query-b"):
        OwnerLock(StorageFile(directory, "owner.json"), location_for_messages=meta.location.uri()).claim("query-b")
    assert OwnerLock(StorageFile(directory, "owner.json"), location_for_messages="x").owner() == "query-a"


def test_state_files_on_s3_are_created_once_and_purged(meta):
    store = StateStore(StorageDirectory(meta, "_sparklink/state"))
    for batch in range(4):
        store.create(SinkState(batch_id=batch, committed_at=float(batch)))
    with pytest.raises(ConcurrentWriterError, match="state .*/_sparklink/state/3.json was written by another"):
        store.create(SinkState(batch_id=3, committed_at=9.0))
    assert store.batch_ids() == [0, 1, 2, 3] and store.latest_before(3).batch_id == 2
    assert store.get(3).committed_at == 3.0
    store.put(SinkState(batch_id=3, committed_at=5.0))  # recovery rewrites a state
    assert store.latest_before(None).committed_at == 5.0
    store.purge_before(2)
    assert store.batch_ids() == [2, 3]
