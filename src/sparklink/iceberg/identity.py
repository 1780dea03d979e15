"""Who wrote a snapshot, and whether a batch is already in the table (driver side).

Every snapshot the sink commits carries three summary properties:

* ``sparklink.app-id``: the application id (the ``appId`` option, or one made when the
  checkpoint was new and kept in it);
* ``sparklink.checkpoint-id``: made when the checkpoint was new (a ``df.write`` job: the job id);
* ``sparklink.batch-id``: the micro-batch id (``job`` for a ``df.write`` job).

A ``df.write`` with ``txnAppId`` / ``txnVersion`` (an idempotent write, e.g. in ``foreachBatch``)
adds two more: ``sparklink.txn-app-id`` and ``sparklink.txn-version``. The pair is committed when
a snapshot in the ancestry of the branch's head carries it (:func:`find_txn`), and it is written
in the very snapshot that adds the write's files, so the record and the commit are one step.

A batch is committed when a snapshot in the ancestry of the current snapshot carries exactly
its (app id, checkpoint id, batch id). The sink never compares batch ids with a maximum
(iceberg#18098: a new checkpoint starting again at batch 0 has a new checkpoint id, so none of
its batches matches the old run's snapshots; iceberg#10892: a rewound checkpoint replays batches
that are found exactly, and a batch that is not found is committed).

The identity file is ``<checkpointLocation>/sparklink/iceberg.json``, version 1.
"""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import dataclass
from pathlib import Path

from sparklink.errors import ConfigError
from sparklink.sink.txn import Txn

SUMMARY_APP_ID = "sparklink.app-id"
SUMMARY_CHECKPOINT_ID = "sparklink.checkpoint-id"
SUMMARY_BATCH_ID = "sparklink.batch-id"
SUMMARY_TXN_APP_ID = "sparklink.txn-app-id"
SUMMARY_TXN_VERSION = "sparklink.txn-version"
JOB_BATCH = "job"
IDENTITY_VERSION = 1
IDENTITY_FILE = "iceberg.json"


@dataclass(frozen=True, kw_only=True)
class WriterIdentity:
    app_id: str
    checkpoint_id: str

    def summary(self, batch_id: int | None) -> dict[str, str]:
        return {SUMMARY_APP_ID: self.app_id, SUMMARY_CHECKPOINT_ID: self.checkpoint_id,
                SUMMARY_BATCH_ID: JOB_BATCH if batch_id is None else str(batch_id)}

    def to_json(self) -> dict:
        return {"v": IDENTITY_VERSION, "appId": self.app_id, "checkpointId": self.checkpoint_id}

    @classmethod
    def from_json(cls, data: dict, *, where: str) -> "WriterIdentity":
        if data.get("v") != IDENTITY_VERSION:
            raise ConfigError("checkpointLocation", f"{where} has version {data.get('v')!r}; this sparklink reads "
                              f"version {IDENTITY_VERSION}")
        return cls(app_id=data["appId"], checkpoint_id=data["checkpointId"])


def checkpoint_identity(checkpoint: Path, app_id: str | None) -> WriterIdentity:
    """The identity kept in the checkpoint, made (atomically, first writer wins) when absent.

    A fixed ``appId`` different from the one in the checkpoint is refused: the checkpoint's
    commits would no longer be found in the table.
    """
    path = checkpoint / "sparklink" / IDENTITY_FILE
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        made = WriterIdentity(app_id=app_id or f"sparklink-{uuid.uuid4().hex}", checkpoint_id=uuid.uuid4().hex)
        temp = path.with_name(f".{IDENTITY_FILE}.{uuid.uuid4().hex}.tmp")
        with open(temp, "w") as out:
            json.dump(made.to_json(), out)
            out.flush()
            os.fsync(out.fileno())
        try:
            os.link(temp, path)  # fails if another process made it first
        except FileExistsError:
            pass
        finally:
            temp.unlink(missing_ok=True)
    identity = WriterIdentity.from_json(json.loads(path.read_text()), where=str(path))
    if app_id is not None and app_id != identity.app_id:
        raise ConfigError("appId", f"'{app_id}' differs from '{identity.app_id}' kept in {path}",
                          "keep the appId of this checkpoint, or start a new checkpoint")
    return identity


def job_identity(job_id: str, app_id: str | None) -> WriterIdentity:
    """A ``df.write`` job: no checkpoint; the job id stands for it."""
    return WriterIdentity(app_id=app_id or f"sparklink-job-{job_id}", checkpoint_id=job_id)


def find_committed(table, identity: WriterIdentity, batch_id: int | None, branch: str = "main"):
    """The snapshot in the ancestry of ``branch``'s head (``main``: the current snapshot) that
    committed this batch, or None.

    The walk stops early at a snapshot of the same writer with a lower batch id: this writer
    commits its batches in order, so the batch cannot be further back.
    """
    from pyiceberg.table.snapshots import ancestors_of

    wanted = identity.summary(batch_id)
    current = table.snapshot_by_name(branch)
    if current is None:
        return None
    for snapshot in ancestors_of(current, table.metadata):
        summary = snapshot.summary
        if summary is None:
            continue
        if summary.get(SUMMARY_APP_ID) != identity.app_id or summary.get(SUMMARY_CHECKPOINT_ID) != identity.checkpoint_id:
            continue
        found = summary.get(SUMMARY_BATCH_ID)
        if found == wanted[SUMMARY_BATCH_ID]:
            return snapshot
        if batch_id is not None and found is not None and found.isdigit() and int(found) < batch_id:
            return None
    return None


def txn_summary(txn: Txn) -> dict[str, str]:
    """The summary properties that record a ``df.write``'s ``txnAppId`` / ``txnVersion``."""
    return {SUMMARY_TXN_APP_ID: txn.app_id, SUMMARY_TXN_VERSION: str(txn.version)}


def find_txn(table, txn: Txn, branch: str = "main"):
    """The snapshot in the ancestry of ``branch``'s head that recorded ``txn``, or None.

    The walk stops early at a snapshot of the same ``txnAppId`` with a lower version: one
    application writes its versions in order (foreachBatch's batch ids), so the pair cannot be
    further back. A version of the same application seen again (a new checkpoint starting at
    batch 0 with the same ``txnAppId``) is found, and skipped, as Delta's ``txn`` skips it.
    """
    from pyiceberg.table.snapshots import ancestors_of

    current = table.snapshot_by_name(branch)
    if current is None:
        return None
    for snapshot in ancestors_of(current, table.metadata):
        summary = snapshot.summary
        if summary is None or summary.get(SUMMARY_TXN_APP_ID) != txn.app_id:
            continue
        found = summary.get(SUMMARY_TXN_VERSION)
        if found == str(txn.version):
            return snapshot
        if found is not None and found.isdigit() and int(found) < txn.version:
            return None
    return None
