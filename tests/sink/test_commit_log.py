"""The sink's commit log: atomic JSON entries, round trips, roll-forward lists, owner lock."""

import json

import pytest

from sparklink.storage.directory import StorageFile, as_directory
from sparklink.errors import CommitError, ConcurrentWriterError
from sparklink.sink.commit_log import STATE_COMMITTING, STATE_FINISHED, CommitLog, CommitLogEntry, OwnerLock


def test_entry_round_trip(tmp_path):
    log = CommitLog(as_directory(tmp_path / "commits"))
    entry = CommitLogEntry(key="7", batch_id=7, state=STATE_COMMITTING,
                           committables=[{"staged": "_staging/j/a.parquet", "final": "part-1.parquet", "rows": 3}],
                           extra={"inProgress": {"b/0": 123}})
    log.put(entry)
    assert log.get("7") == entry
    assert json.loads((tmp_path / "commits" / "7.json").read_text())["v"] == 1
    assert [p.name for p in (tmp_path / "commits").iterdir()] == ["7.json"]  # no temporary file left


def test_batches_jobs_unfinished_and_purge(tmp_path):
    log = CommitLog(as_directory(tmp_path))
    for batch in (0, 1, 2, 10):
        log.put(CommitLogEntry(key=str(batch), batch_id=batch, state=STATE_FINISHED, committables=[]))
    log.put(CommitLogEntry(key="11", batch_id=11, state=STATE_COMMITTING, committables=[]))
    log.put(CommitLogEntry(key=CommitLog.key_for_job("abc"), batch_id=None, state=STATE_COMMITTING, committables=[]))
    assert log.batch_ids() == [0, 1, 2, 10, 11]
    assert log.latest_batch_id() == 11
    assert sorted(e.key for e in log.unfinished()) == ["11", "job-abc"]
    log.purge_batches_before(10)
    assert log.batch_ids() == [10, 11]


def test_corrupt_and_future_entries_are_reported(tmp_path):
    (tmp_path / "3.json").write_text("{not json")
    (tmp_path / "4.json").write_text(json.dumps({"v": 2}))
    log = CommitLog(as_directory(tmp_path))
    with pytest.raises(CommitError, match=r"3\.json is not valid JSON"):
        log.get("3")
    with pytest.raises(CommitError, match="commit log format version 2 is not supported"):
        log.get("4")


def test_owner_lock_refuses_a_second_query(tmp_path):
    lock = OwnerLock(StorageFile(as_directory(tmp_path), "owner.json"), location_for_messages=str(tmp_path))
    lock.claim("query-a")
    lock.claim("query-a")  # a restart of the same query
    with pytest.raises(ConcurrentWriterError, match="belongs to streaming query query-a; query query-b may not"):
        lock.claim("query-b")


def test_owner_claim_is_all_or_nothing(tmp_path):
    """A driver killed while claiming leaves at most a hidden temporary file (here: a partial
    one), never a half-written owner.json; the next claim works and leaves no temporary file."""
    (tmp_path / ".owner.json.abc.tmp").write_text('{"queryId": "que')
    lock = OwnerLock(StorageFile(as_directory(tmp_path), "owner.json"), location_for_messages=str(tmp_path))
    assert lock.owner() is None
    lock.claim("query-a")
    assert json.loads((tmp_path / "owner.json").read_text())["queryId"] == "query-a"
    assert sorted(p.name for p in tmp_path.iterdir()) == [".owner.json.abc.tmp", "owner.json"]
    with pytest.raises(ConcurrentWriterError):
        OwnerLock(StorageFile(as_directory(tmp_path), "owner.json"), location_for_messages=str(tmp_path)).claim("query-b")
