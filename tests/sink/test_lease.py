"""The output lease's persisted format (round trip, version 1 still read) and its conditional
writes on local disk (the same code runs on S3: tests/files/test_file_sink_spark_log_on_s3.py)."""

from __future__ import annotations

import json

import pytest

from sparklink.storage.directory import as_directory
from sparklink.errors import CommitError, ConcurrentWriterError
from sparklink.sink.lease import LEASE_VERSION, LeaseState, OutputLease
from sparklink.spark.driver import current_driver


def test_lease_state_round_trips_and_version_1_is_read_as_not_finishing():
    state = LeaseState(query_id=None, epoch=3, renewed_at=10.0, expires_at=70.0, driver=current_driver(),
                       finishing=True)
    data = json.loads(json.dumps(state.to_json()))
    assert data["v"] == LEASE_VERSION
    assert LeaseState.from_json(data, source="x") == state
    old = {"v": 1, "queryId": "q1", "epoch": 2, "renewedAt": 1.0, "expiresAt": 2.0, "driver": None}
    assert LeaseState.from_json(old, source="x") == LeaseState(query_id="q1", epoch=2, renewed_at=1.0,
                                                               expires_at=2.0, driver=None, finishing=False)
    with pytest.raises(CommitError, match="lease version 9 is not supported"):
        LeaseState.from_json(dict(old, v=9), source="x")


def test_renewals_within_a_tenth_of_the_timeout_only_read_and_a_stale_write_is_refused(tmp_path):
    lease = OutputLease(directory=as_directory(tmp_path / "_sparklink"), timeout=100)
    with lease.exclusive():
        assert lease.renew("q1", driver=current_driver(), now=1000.0) == 0
        first = lease.read()
        assert lease.renew("q1", driver=current_driver(), now=1005.0) == 0  # renewed 5 s ago by this driver: only read
        assert lease.read() == first
        assert lease.renew("q1", driver=current_driver(), now=1011.0) == 0  # more than a tenth of the timeout: written
        assert lease.read().expires_at == 1111.0
    other = OutputLease(directory=as_directory(tmp_path / "_sparklink"), timeout=100)
    other.read()
    lease.renew("q2", driver=current_driver(), now=1020.0)  # another query id: written
    assert not other._write(other._last)  # based on the version before: refused
    with pytest.raises(ConcurrentWriterError, match="changed after it was found free"):
        other.fence(driver=current_driver(), now=2000.0)  # the fence is conditional on what ensure_free (here: read) saw
