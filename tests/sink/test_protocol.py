"""The driver-side commit protocol, run directly on the example directory sink (real files).

These tests call the protocol the way Spark's ``commit(messages, batchId)`` does, including
the odd sequences a crash produces: a replayed batch, an older batch after a newer one, an
entry left half-committed, committers that ask for retries or fail.
"""

import os

import pyarrow.dataset as ds
import pytest

from sparklink.errors import CommitError
from sparklink.examples.directory_sink import DirectorySink
from sparklink.examples.sequence_source import SCHEMA
from sparklink.sink import CommitLog, CommitRequest, Committer
from sparklink.sink.commit_log import STATE_COMMITTING, CommitLogEntry
from sparklink.sink.protocol import commit_batch, run_committer
from sparklink.testing.conformance import write_attempt


def stage(sink, batch_id, partition, ids, attempt=0, job="job1"):
    """Run one writer as an executor task would and return its committables."""
    return write_attempt(sink, batch_id, partition, attempt, ids, job)


def visible_ids(root):
    return sorted(ds.dataset(root, format="parquet").to_table().column("id").to_pylist())


@pytest.fixture
def sink(tmp_path):
    return DirectorySink({"path": str(tmp_path / "out")}, SCHEMA)


def test_commit_makes_staged_files_visible_once(sink):
    committables = stage(sink, 0, 0, [1, 2]) + stage(sink, 0, 1, [3])
    assert not any(sink.root.glob("part-*"))  # staged output is invisible
    assert commit_batch(sink, 0, "job1", committables, ["q1"]) is True
    assert visible_ids(sink.root) == [1, 2, 3]
    assert CommitLog(sink.commit_log_dir()).get("0").finished


def test_replayed_batch_is_skipped_and_its_staged_output_removed(sink):
    commit_batch(sink, 0, "job1", stage(sink, 0, 0, [1, 2]), ["q1"])
    replay = stage(sink, 0, 0, [1, 2], job="job2")
    assert commit_batch(sink, 0, "job2", replay, ["q1"]) is False
    assert not (sink.root / replay[0]["staged"]).exists()
    assert visible_ids(sink.root) == [1, 2]


def test_older_batch_after_a_newer_one_is_skipped(sink):
    commit_batch(sink, 5, "job1", stage(sink, 5, 0, [10]), ["q1"])
    old = stage(sink, 4, 0, [9], job="job0")
    assert commit_batch(sink, 4, "job0", old, ["q1"]) is False
    assert visible_ids(sink.root) == [10]


def test_half_committed_entry_rolls_forward_on_the_next_commit(sink):
    first = stage(sink, 0, 0, [1]) + stage(sink, 0, 1, [2])
    log = CommitLog(sink.commit_log_dir())
    log.put(CommitLogEntry(key="0", batch_id=0, state=STATE_COMMITTING, committables=first))
    # a crash renamed only the first file
    (sink.root / first[0]["staged"]).rename(sink.root / first[0]["final"])
    commit_batch(sink, 1, "job2", stage(sink, 1, 0, [3], job="job2"), ["q1"])
    assert visible_ids(sink.root) == [1, 2, 3]
    assert log.get("0").finished and log.get("1").finished


def test_lost_staged_file_fails_the_commit_with_a_clear_error(sink):
    committables = stage(sink, 0, 0, [1])
    (sink.root / committables[0]["staged"]).unlink()
    with pytest.raises(CommitError, match="staged file .* is gone"):
        commit_batch(sink, 0, "job1", committables, ["q1"])


class FlakyCommitter(Committer):
    """Asks for a retry the first time each request is seen, then commits."""

    def __init__(self, outcome):
        self.outcome = outcome
        self.calls = 0

    def commit(self, requests):
        self.calls += 1
        for request in requests:
            if self.outcome == "retry" and request.number_of_retries == 0:
                request.retry_later()
            elif self.outcome == "known":
                request.signal_failed_with_known_reason(FileNotFoundError("removed by hand"))
            elif self.outcome == "unknown":
                request.signal_failed_with_unknown_reason(OSError("disk on fire"))


class OneCommitterSink(DirectorySink):
    def __init__(self, committer, root):
        super().__init__({"path": str(root)}, SCHEMA)
        self.committer = committer

    def create_committer(self):
        return self.committer


@pytest.mark.parametrize(("outcome", "calls"), [("retry", 2), ("known", 1), ("none", 1)],
                         ids=["retry-later-then-commit", "failed-known-reason-dropped", "committed"])
def test_committer_retry_semantics(tmp_path, outcome, calls):
    committer = FlakyCommitter(outcome)
    run_committer(OneCommitterSink(committer, tmp_path), [{"a": 1}], 0)
    assert committer.calls == calls


def test_unknown_failure_raises(tmp_path):
    with pytest.raises(CommitError, match="commit of batch 3 failed .* disk on fire"):
        run_committer(OneCommitterSink(FlakyCommitter("unknown"), tmp_path), [{"a": 1}], 3)


def test_commit_request_update_and_retry():
    request = CommitRequest(committable={"gid": "a"}, batch_id=1)
    request.update_and_retry_later({"gid": "b"})
    assert request.committable == {"gid": "b"}


def test_commit_cost_does_not_grow_with_what_was_ever_committed(sink, monkeypatch):
    """A commit reads the same number of log entries and lists a directory of the same size
    at its 15th micro-batch as at its 40th (entries past the retention are purged), and a
    ``df.write`` job at its 5th as at its 40th (job entries are never purged: only those
    marked open are read)."""
    monkeypatch.setattr(sink, "commit_log_retention", lambda: 10)
    reads, listed = [], []
    real_get, real_listdir = CommitLog.get, os.listdir

    def counting_get(self, key):
        reads.append(key)
        return real_get(self, key)

    def counting_listdir(path):
        names = real_listdir(path)
        listed.append(len(names))
        return names

    monkeypatch.setattr(CommitLog, "get", counting_get)
    monkeypatch.setattr(os, "listdir", counting_listdir)

    def cost(batch_id, job_id):
        reads.clear()
        listed.clear()
        commit_batch(sink, batch_id, job_id, stage(sink, batch_id, 0, [batch_id if batch_id is not None else 0],
                                                   job=job_id), ["q1"])
        return len(reads), max(listed, default=0)

    batch_costs = {batch: cost(batch, f"b{batch}") for batch in range(40)}
    assert batch_costs[15] == batch_costs[39], batch_costs
    job_costs = {job: cost(None, f"j{job}") for job in range(40)}
    assert job_costs[5][0] == job_costs[39][0], job_costs  # entries read
    assert len(CommitLog(sink.commit_log_dir()).job_keys()) == 40
