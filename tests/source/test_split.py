"""Splits round-trip through JSON and reject what cannot be persisted."""

import pytest

from sparklink.errors import SplitError
from sparklink.source import Split


def test_split_round_trip():
    split = Split(split_id="file-3", state={"path": "/d/a.csv", "start": 0, "end": 1024, "header": True})
    assert Split.from_json(split.to_json()) == split


@pytest.mark.parametrize(("text", "message"), [
    ("not json", "split is not valid JSON"),
    ('{"v": 99, "id": "x", "state": {}}', "split format version 99 is not supported"),
], ids=["garbage", "future-version"])
def test_bad_split_text(text, message):
    with pytest.raises(SplitError, match=message):
        Split.from_json(text)


def test_split_state_must_be_json():
    with pytest.raises(SplitError, match="state of split 's' is not JSON-serialisable"):
        Split(split_id="s", state={"when": object()})
    with pytest.raises(SplitError, match="split_id must be a non-empty string"):
        Split(split_id="", state={})
