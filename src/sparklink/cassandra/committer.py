"""The committers of the ``sparklink.cassandra`` sink (driver side, inside Spark's commit).

* :class:`NoOpCommitter` (``upsert``): the tasks wrote and were acknowledged; nothing is left.
* :class:`WriteAheadCommitter` (``write-ahead``, Flink's ``GenericWriteAheadSink.sendValues``
  plus its ``CheckpointCommitter``): if the commit table records the batch, nothing is sent
  (a replay, or a roll-forward after the record); else every staged segment of the batch is
  read back from the checkpoint's storage and sent with bounded concurrency, and once every
  row is acknowledged the batch is recorded. A crash between the last write and the record
  makes the roll-forward send the same staged rows again: the same values by primary key.
  With ``writeMode=upsert`` the whole batch's changes are reduced to one per key before they
  are sent (INSERTs and DELETEs), so a key's changes may be in any partition.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.ipc as ipc

from sparklink.cassandra.commit_table import batch_recorded, record_batch
from sparklink.cassandra.connection import driver_errors, shared_session
from sparklink.cassandra.sender import RequestWindow
from sparklink.cassandra.writer import StagingSink
from sparklink.errors import CommitError
from sparklink.faults import fault_point
from sparklink.sink import CommitRequest, Committer

BEFORE_RECORD = "cassandra.before_record"  # fault point: every row sent and acknowledged, batch not yet recorded


class NoOpCommitter(Committer):
    """The rows are written by the tasks; nothing is left to do on the driver."""

    def commit(self, requests: list[CommitRequest]) -> None:
        for request in requests:
            request.signal_already_committed()


class WriteAheadCommitter(Committer):
    """Driver side: send a batch's staged segments, then record the batch."""

    def __init__(self, sink: StagingSink):
        self.sink = sink
        self.config = sink.config

    def commit(self, requests: list[CommitRequest]) -> None:
        if not requests:
            return
        config, settings = self.config, self.config.connection
        keys = {request.committable["batch"] for request in requests}
        if len(keys) != 1:
            raise CommitError(f"one commit holds staged rows of several batches {sorted(keys)}; refused")
        key = keys.pop()
        session = shared_session(settings)
        try:
            recorded = batch_recorded(session, config.commit_keyspace, config.commit_table, sink_id=config.sink_id,
                                      batch_key=key)
        except driver_errors() as exc:
            raise settings.error(f"reading {config.commit_keyspace}.{config.commit_table}", exc) from None
        if recorded:
            for request in requests:
                request.signal_already_committed()
            return
        storage = self.sink.staging_storage()
        try:
            statements = self.sink.row_statements(session)
        except driver_errors() as exc:
            raise settings.error(f"preparing the INSERT into {self.sink.table}", exc) from None
        window = RequestWindow(session, settings, limit=config.max_concurrent_requests,
                               max_retries=config.max_retries, doing=f"writing batch {key} to {self.sink.table}")
        rows = 0
        changes: list[pa.RecordBatch] = []  # writeMode=upsert: the whole batch, reduced before it is sent
        for request in sorted(requests, key=lambda r: r.committable["partition"]):
            for segment in request.committable["segments"]:
                stored = storage.read(segment)
                if stored is None:
                    raise CommitError(f"staged segment {storage.uri(segment)} of batch {key} is missing; its rows "
                                      "cannot be written")
                try:
                    batches = list(ipc.open_stream(pa.py_buffer(stored.data)))
                except pa.ArrowInvalid as exc:
                    raise CommitError(f"staged segment {storage.uri(segment)} of batch {key} is corrupt: {exc}") \
                        from None
                for batch in batches:
                    rows += batch.num_rows
                    if self.config.changelog is not None:
                        changes.append(batch)
                        continue
                    for statement in statements.statements(batch):
                        window.send(statement)
        if changes:
            for statement in self.sink.change_statements(session, pa.Table.from_batches(changes)):
                window.send(statement)
        window.finish()
        fault_point(BEFORE_RECORD, batch_id=requests[0].batch_id)
        try:
            record_batch(session, config.commit_keyspace, config.commit_table, sink_id=config.sink_id,
                         batch_key=key, row_count=rows)
        except driver_errors() as exc:
            raise settings.error(f"recording batch {key} in {config.commit_keyspace}.{config.commit_table}",
                                 exc) from None
