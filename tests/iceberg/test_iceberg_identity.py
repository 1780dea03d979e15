"""The sink's identity file (``<checkpoint>/sparklink/iceberg.json``, version 1): round trip,
one identity per checkpoint, versions it does not read refused."""

from __future__ import annotations

import json

import pytest

from sparklink.errors import ConfigError
from sparklink.iceberg.identity import IDENTITY_VERSION, WriterIdentity, checkpoint_identity, job_identity


def test_round_trip_of_the_persisted_identity():
    identity = WriterIdentity(app_id="orders", checkpoint_id="c0ffee")
    data = json.loads(json.dumps(identity.to_json()))
    assert data == {"v": IDENTITY_VERSION, "appId": "orders", "checkpointId": "c0ffee"}
    assert WriterIdentity.from_json(data, where="test") == identity


def test_one_identity_per_checkpoint(tmp_path):
    made = checkpoint_identity(tmp_path / "ck", None)
    assert made.app_id.startswith("sparklink-") and made.checkpoint_id
    assert checkpoint_identity(tmp_path / "ck", None) == made
    assert checkpoint_identity(tmp_path / "ck", made.app_id) == made
    other = checkpoint_identity(tmp_path / "ck2", made.app_id)
    assert other.app_id == made.app_id and other.checkpoint_id != made.checkpoint_id
    assert job_identity("j1", None).summary(None) == {"sparklink.app-id": "sparklink-job-j1",
                                                      "sparklink.checkpoint-id": "j1", "sparklink.batch-id": "job"}


def test_a_version_it_does_not_read_is_refused(tmp_path):
    path = tmp_path / "ck" / "sparklink" / "iceberg.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"v": 99, "appId": "a", "checkpointId": "b"}))
    with pytest.raises(ConfigError, match="version 99"):
        checkpoint_identity(tmp_path / "ck", None)
