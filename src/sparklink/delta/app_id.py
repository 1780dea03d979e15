"""The stream's Delta application id, kept in its checkpoint (driver side).

A streaming query commits each micro-batch with ``txn(appId, version = batchId)``. The id is
made once per checkpoint (``sparklink-<uuid>``) and stored in
``<checkpointLocation>/sparklink/delta-app.json``, so a restart of the same checkpoint finds the
batches it committed, while a fresh checkpoint (batch ids from 0 again) gets an id of its own and
neither skips nor repeats anything. Persisted format version 1: ``{"v": 1, "appId": "..."}``.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

from sparklink.errors import CommitError
from sparklink.storage.local import LocalStorage

APP_ID_VERSION = 1
APP_ID_FILE = "delta-app.json"


def app_id_path(checkpoint: Path) -> Path:
    return checkpoint / "sparklink" / APP_ID_FILE


def encode(app_id: str) -> bytes:
    return json.dumps({"v": APP_ID_VERSION, "appId": app_id}).encode()


def decode(data: bytes, where: Path) -> str:
    try:
        record = json.loads(data)
    except ValueError as exc:
        raise CommitError(f"{where} is not JSON ({exc}); it names the Delta application id of this "
                          "checkpoint: restore it from a backup or start a fresh checkpoint") from None
    if not isinstance(record, dict) or record.get("v") != APP_ID_VERSION or not isinstance(record.get("appId"), str):
        raise CommitError(f"{where}: unsupported Delta application id record {record!r} (version {APP_ID_VERSION} expected)")
    return record["appId"]


def stream_app_id(checkpoint: Path) -> str:
    """The checkpoint's application id, created (atomically, first writer wins: the storage
    seam's create-if-absent) when absent."""
    path = app_id_path(checkpoint)
    if not path.exists():
        LocalStorage(path.parent).create_if_absent(APP_ID_FILE, encode(f"sparklink-{uuid.uuid4()}"))  # None: theirs is kept
    return decode(path.read_bytes(), path)
