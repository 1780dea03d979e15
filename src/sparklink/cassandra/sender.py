"""Rows to Cassandra: Arrow record batches become prepared INSERTs, sent with bounded concurrency
and retried on timeouts (executor side for ``upsert``, driver side in the ``write-ahead`` commit).

* :class:`RowStatements` prepares ``INSERT INTO t (...) VALUES (...) USING TIMESTAMP ?`` once
  per task and binds each row with a write timestamp of its own from :class:`WriteClock`
  (monotonic in the process). So a retried request carries the timestamp it was first sent
  with and never overwrites a later row of the same key, requests may complete in any order,
  and within a task the last row of a key wins, as Cassandra resolves cells by timestamp.
  Rows sharing a partition key (tables with clustering columns) go in unlogged batches of up
  to ``batchRows`` rows (and about 40 KiB, below the server's default batch size limit).
* :class:`RequestWindow` keeps at most ``maxConcurrentRequests`` requests in flight (the
  driver's futures and callbacks), retries timeouts, unavailable and overloaded replicas up
  to ``maxRetries`` times with a backoff, and raises the first other error.

Values leave Arrow column by column (``to_pylist``); the driver's Cython serializers encode
them. Spark strings bound to ``uuid`` / ``timeuuid`` columns are parsed to UUIDs and Arrow
maps (lists of pairs) become dicts.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa

from sparklink.cassandra.connection import ConnectionSettings, driver_errors
from sparklink.cassandra.target_table import TargetTable, outer_kind, quote

BATCH_BYTES = 40 * 1024  # below Cassandra's default batch_size_fail_threshold (50 KiB)
MAX_BACKOFF_SECONDS = 5.0


class WriteClock:
    """Write timestamps in microseconds since the epoch, strictly increasing in this process."""

    def __init__(self) -> None:
        self._last = 0
        self._lock = threading.Lock()

    def block(self, count: int) -> int:
        """The first of ``count`` consecutive timestamps reserved for the caller."""
        with self._lock:
            start = max(time.time_ns() // 1000, self._last + 1)
            self._last = start + count - 1
            return start


CLOCK = WriteClock()


def _uuid_or_none(value: Any) -> Any:
    return uuid.UUID(value) if isinstance(value, str) else value


def _converter(cql_type: str) -> Callable[[list[Any]], list[Any]] | None:
    kind = outer_kind(cql_type)
    if kind in ("uuid", "timeuuid"):
        return lambda values: [_uuid_or_none(v) for v in values]
    if kind == "map":
        return lambda values: [dict(v) if v is not None else None for v in values]
    return None


class RowStatements:
    """The prepared INSERT of a task's columns and the statements for each record batch."""

    def __init__(self, session: Any, table: TargetTable, fields: list[str], columns: list[str], batch_rows: int,
                 timestamp_field: str | None = None):
        """``timestamp_field``: a DataFrame field whose values are the write timestamps
        (``writeMode=upsert`` with a ``sequenceColumn``); None: :data:`CLOCK`."""
        self.timestamp_field = timestamp_field
        from cassandra.query import BatchStatement, BatchType

        self._batch_statement = lambda: BatchStatement(batch_type=BatchType.UNLOGGED)
        self.fields = fields
        placeholders = ", ".join("?" for _ in columns)
        cql = (f"INSERT INTO {table.qualified} ({', '.join(quote(c) for c in columns)}) VALUES ({placeholders}) "
               "USING TIMESTAMP ?")
        self.prepared = session.prepare(cql)
        self.prepared.is_idempotent = True
        self.converters = [_converter(table.columns[c]) for c in columns]
        partition_columns = [columns.index(k) for k in table.partition_key]
        self.partition_positions = partition_columns if table.clustering and batch_rows > 1 else None
        self.batch_rows = batch_rows

    def rows(self, batch: pa.RecordBatch) -> list[tuple[Any, ...]]:
        """The batch's rows as bind tuples (values, then the write timestamp)."""
        values = []
        for name, convert in zip(self.fields, self.converters, strict=True):
            column = batch.column(name).to_pylist()
            values.append(convert(column) if convert else column)
        values.append(write_timestamps(batch, self.timestamp_field))
        return list(zip(*values, strict=True))

    def statements(self, batch: pa.RecordBatch) -> Iterator[Any]:
        """One bound statement per row, or unlogged batches of rows sharing a partition key."""
        bind = self.prepared.bind
        rows = self.rows(batch)
        if self.partition_positions is None:
            for row in rows:
                yield bind(row)
            return
        per_batch = max(1, min(self.batch_rows, BATCH_BYTES // max(1, batch.nbytes // max(1, batch.num_rows))))
        positions = self.partition_positions
        groups: dict[tuple[Any, ...], list[tuple[Any, ...]]] = {}
        for row in rows:
            groups.setdefault(tuple(row[p] for p in positions), []).append(row)
        for group in groups.values():
            if len(group) == 1:
                yield bind(group[0])
                continue
            for start in range(0, len(group), per_batch):
                statement = self._batch_statement()
                for row in group[start:start + per_batch]:
                    statement.add(bind(row))
                statement.is_idempotent = True
                yield statement


def write_timestamps(batch: pa.RecordBatch | pa.Table, field: str | None) -> Any:
    """The write timestamp of each row: the values of ``field`` (a sequence column), or
    consecutive ones from :data:`CLOCK`."""
    if field is not None:
        return batch.column(field).to_pylist()
    start = CLOCK.block(batch.num_rows)
    return range(start, start + batch.num_rows)


class DeleteStatements:
    """``writeMode=upsert``: the prepared ``DELETE ... USING TIMESTAMP ? WHERE <primary key>`` and
    one bound statement per deleted key. The delete is a tombstone carrying the change's write
    timestamp, so a change with an older timestamp arriving later does not bring the row back."""

    def __init__(self, session: Any, table: TargetTable, key_fields: list[str], timestamp_field: str | None = None):
        self.key_fields = key_fields
        self.timestamp_field = timestamp_field
        where = " AND ".join(f"{quote(k)} = ?" for k in table.primary_key)
        self.prepared = session.prepare(f"DELETE FROM {table.qualified} USING TIMESTAMP ? WHERE {where}")
        self.prepared.is_idempotent = True
        self.converters = [_converter(table.columns[k]) for k in table.primary_key]

    def statements(self, keys: pa.Table) -> Iterator[Any]:
        """``keys``: the key fields (in primary-key order) and, with one, the timestamp field."""
        columns = [write_timestamps(keys, self.timestamp_field)]
        for name, convert in zip(self.key_fields, self.converters, strict=True):
            values = keys.column(name).to_pylist()
            columns.append(convert(values) if convert else values)
        bind = self.prepared.bind
        for row in zip(*columns, strict=True):
            yield bind(row)


def _retryable(exc: BaseException) -> bool:
    from cassandra import OperationTimedOut, Unavailable, WriteTimeout
    from cassandra.cluster import NoHostAvailable
    from cassandra.protocol import OverloadedErrorMessage

    return isinstance(exc, (WriteTimeout, OperationTimedOut, Unavailable, OverloadedErrorMessage, NoHostAvailable))


class RequestWindow:
    """At most ``limit`` requests in flight on ``session``; retries transient failures.

    :meth:`send` blocks while the window is full; :meth:`finish` waits for every request and
    raises the first error that was not retried (a CassandraError naming ``doing``)."""

    def __init__(self, session: Any, settings: ConnectionSettings, *, limit: int, max_retries: int, doing: str):
        self.session = session
        self.settings = settings
        self.limit = limit
        self.max_retries = max_retries
        self.doing = doing
        self.in_flight = 0
        self.sent = 0
        self.retried = 0
        self._retries: list[tuple[float, int, Any, int]] = []  # heap of (due, seq, statement, attempt)
        self._seq = itertools.count()
        self._error: BaseException | None = None
        self._cond = threading.Condition()

    def send(self, statement: Any) -> None:
        self._wait(idle=False)
        self._submit(statement, 0)

    def finish(self) -> None:
        self._wait(idle=True)

    def _submit(self, statement: Any, attempt: int) -> None:
        with self._cond:
            self.in_flight += 1
        try:
            future = self.session.execute_async(statement)
        except driver_errors() as exc:  # raised before the request left (no host, shut down): its failure
            self._failed(exc, statement, attempt)
            return
        future.add_callbacks(self._done, self._failed, errback_args=(statement, attempt))

    def _done(self, _result: Any) -> None:
        with self._cond:
            self.in_flight -= 1
            self.sent += 1
            self._cond.notify_all()

    def _failed(self, exc: BaseException, statement: Any, attempt: int) -> None:
        with self._cond:
            self.in_flight -= 1
            if _retryable(exc) and attempt < self.max_retries:
                due = time.monotonic() + min(MAX_BACKOFF_SECONDS, 0.1 * 2 ** attempt)
                heapq.heappush(self._retries, (due, next(self._seq), statement, attempt + 1))
                self.retried += 1
            elif self._error is None:
                self._error = exc
            self._cond.notify_all()

    def _wait(self, *, idle: bool) -> None:
        while True:
            with self._cond:
                if self._error is not None:
                    raise self.settings.error(self.doing, self._error)
                now = time.monotonic()
                if self._retries and self._retries[0][0] <= now and self.in_flight < self.limit:
                    _, _, statement, attempt = heapq.heappop(self._retries)
                elif not self._retries and (self.in_flight == 0 if idle else self.in_flight < self.limit):
                    return
                else:
                    wait = self._retries[0][0] - now if self._retries else 1.0
                    self._cond.wait(timeout=max(0.001, min(wait, 1.0)))
                    continue
            self._submit(statement, attempt)
