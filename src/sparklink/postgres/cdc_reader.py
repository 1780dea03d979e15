"""The ``sparklink.postgres-cdc`` reader (executor side): snapshot chunks and log ranges.

*Snapshot chunk*: one primary-key range of the table, read with ``COPY (SELECT ...)`` in a
repeatable-read transaction that adopts the snapshot the slot's creation exported
(``SET TRANSACTION SNAPSHOT``), so every chunk sees the table exactly as it was at the slot's start.
Rows get ``_op`` = ``r`` and ``_lsn`` = 0 (before every change of the log).

*Log range* ``(from, to]``: the slot's changes are peeked (never consumed) with
``pg_logical_slot_peek_binary_changes(slot, to, ...)``, which returns whole transactions from the
slot's confirmed position up to the one whose commit record ends at ``to``; transactions ending at or
before ``from`` (committed by Spark, the slot not advanced yet) are dropped. Peeking repeats the same
bytes until the slot moves, so a retried task or a replayed batch reads the same rows. The slot must
not be past ``from`` (checked first): the changes in between would be gone.
"""

from __future__ import annotations

import datetime as dt
import decimal
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pyarrow as pa
from psycopg import sql
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    ShortType,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from sparklink.errors import DataError
from sparklink.postgres import pgoutput
from sparklink.postgres.cdc_config import CdcConfig, CdcError
from sparklink.postgres.copy_transport import copy_out
from sparklink.postgres.type_mapping import select_expression
from sparklink.source import SourceReader, Split

BATCH_ROWS = 16_384
RESTART_HINT = ("the stream's schema is fixed at its start. Restart with a new checkpoint and a new slot "
                "(startingPosition=snapshot), or with startingPosition=latest after the change; see "
                "docs/postgres-cdc.md, 'Schema changes'")
PEEK_SQL = ("SELECT (lsn - '0/0'::pg_lsn)::bigint, data FROM pg_logical_slot_peek_binary_changes("
            "%s, %s::pg_lsn, NULL, 'proto_version', '1', 'publication_names', %s)")


def _converter(data_type: DataType, column: str) -> Callable[[bytes], Any]:
    """Text form (as pgoutput sends it, session in UTC / ISO) -> the Python value of ``data_type``."""
    if isinstance(data_type, (ByteType, ShortType, IntegerType, LongType)):
        return int
    if isinstance(data_type, (FloatType, DoubleType)):
        return float
    if isinstance(data_type, BooleanType):
        return lambda b: b == b"t"
    if isinstance(data_type, DecimalType):
        quantum = decimal.Decimal(1).scaleb(-data_type.scale)

        def to_decimal(b: bytes) -> decimal.Decimal:
            value = decimal.Decimal(b.decode())
            if not value.is_finite():
                raise DataError(f"column '{column}': numeric value {b.decode()} has no Spark decimal form")
            return value.quantize(quantum, rounding=decimal.ROUND_HALF_UP)
        return to_decimal
    if isinstance(data_type, DateType):
        return lambda b: dt.date.fromisoformat(b.decode())
    if isinstance(data_type, (TimestampType, TimestampNTZType)):
        return lambda b: dt.datetime.fromisoformat(b.decode())
    if isinstance(data_type, BinaryType):
        return lambda b: bytes.fromhex(b[2:].decode())
    return lambda b: b.decode("utf-8")


class CdcReader(SourceReader):
    """Reads one split per call; one connection per task (closed in :meth:`close`)."""

    def __init__(self, config: CdcConfig, schema: StructType, table_columns: list[str], type_oids: list[int]):
        self.config = config
        self.schema = schema
        self.table_columns = table_columns
        self.type_oids = type_oids
        self.arrow_schema = to_arrow_schema(schema, timezone="UTC")
        self.table_label = f"{config.table.schema}.{config.table.name}"
        self._conn: psycopg.Connection | None = None

    def _connect(self, *, autocommit: bool) -> psycopg.Connection:
        if self._conn is None:
            self._conn = self.config.connection.connect(autocommit=autocommit)
            self._conn.execute("SET TimeZone TO 'UTC'")
            self._conn.execute("SET DateStyle TO 'ISO, YMD'")
            self._conn.execute("SET extra_float_digits TO 3")
            self._conn.execute("SET bytea_output TO 'hex'")
            if not autocommit:
                self._conn.commit()
        return self._conn

    def read(self, split: Split) -> Iterator[pa.RecordBatch]:
        if split.state["kind"] == "snapshot":
            return self._read_chunk(split)
        return self._read_log(split.state["from"], split.state["to"])

    # -- the snapshot ----------------------------------------------------------------------------
    def _read_chunk(self, split: Split) -> Iterator[pa.RecordBatch]:
        state = split.state
        conn = self._connect(autocommit=False)
        keys = [sql.Identifier(k) for k in state["key"]]
        key_row = sql.SQL("({})").format(sql.SQL(", ").join(keys))
        conditions: list[sql.Composable] = []
        params: list[str] = []
        for bound, operator in ((state["lower"], ">="), (state["upper"], "<")):
            if bound is not None:
                conditions.append(sql.SQL("{} {} ({})").format(key_row, sql.SQL(operator),
                                                              sql.SQL(", ").join(sql.Placeholder() * len(bound))))
                params.extend(bound)
        where = sql.SQL(" AND ").join(conditions) if conditions else sql.SQL("TRUE")
        columns = [select_expression(self.schema[name]) for name in self.table_columns]
        columns += [sql.SQL("'r'"), sql.SQL("0::bigint"), sql.SQL("NULL::text"), sql.Literal(self.table_label)]
        query = sql.SQL("SELECT {} FROM {} WHERE {}").format(sql.SQL(", ").join(columns),
                                                             self.config.table.identifier, where)
        try:
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            conn.execute(sql.SQL("SET TRANSACTION SNAPSHOT {}").format(sql.Literal(state["snapshot"])))
        except psycopg.Error as exc:
            conn.rollback()
            raise CdcError(f"the snapshot of slot '{self.config.slot_name}' is gone ({exc.diag.message_primary}): "
                           f"PostgreSQL keeps an exported snapshot only while the driver session that created the "
                           f"slot lives; see docs/postgres-cdc.md, 'Restarting during the snapshot'") from None
        try:
            yield from copy_out(conn.cursor(), query, self.arrow_schema, params)
            conn.commit()
        except psycopg.Error as exc:
            raise self.config.connection.error(f"reading snapshot chunk {split.split_id} of {self.table_label}",
                                               exc) from None

    # -- the log ---------------------------------------------------------------------------------
    def _read_log(self, start: int, end: int) -> Iterator[pa.RecordBatch]:
        conn = self._connect(autocommit=True)
        config = self.config
        try:
            row = conn.execute("SELECT (confirmed_flush_lsn - '0/0'::pg_lsn)::bigint FROM pg_replication_slots "
                               "WHERE slot_name = %s", [config.slot_name]).fetchone()
        except psycopg.Error as exc:
            raise config.connection.error(f"looking up slot '{config.slot_name}'", exc) from None
        if row is None:
            raise CdcError(f"replication slot '{config.slot_name}' does not exist any more: the changes after "
                           f"{pgoutput.format_lsn(start)} are lost; drop the checkpoint and start again")
        if row[0] > start:
            raise CdcError(f"replication slot '{config.slot_name}' is at {pgoutput.format_lsn(row[0])}, past the "
                           f"batch's start {pgoutput.format_lsn(start)}: the changes in between are gone (another "
                           f"consumer moved the slot?); drop the slot and the checkpoint and start again")
        try:
            # row by row (libpq's single-row mode): a batch's changes are never all in the task's memory
            rows = conn.cursor().stream(PEEK_SQL, [config.slot_name, pgoutput.format_lsn(end), config.publication])
            yield from self._decode(rows, start, end)
        except psycopg.Error as exc:
            raise config.connection.error(f"reading the changes of slot '{config.slot_name}'", exc) from None

    def _decode(self, rows: Iterator[tuple[Any, ...]], start: int,
                end: int) -> Iterator[pa.RecordBatch]:
        names = self.table_columns
        converters = [_converter(self.schema[name].dataType, name) for name in names]
        width = len(names)
        relations: dict[int, pgoutput.Relation] = {}
        ours: set[int] = set()
        out: list[list[Any]] = [[] for _ in range(width + 4)]
        pending: list[tuple[Any, ...]] = []
        commit_ts: dt.datetime | None = None
        count = 0

        def values(tuple_data: tuple[object, ...], old: tuple[object, ...] | None) -> list[Any]:
            result = []
            for i in range(width):
                raw = tuple_data[i]
                if raw is pgoutput.UNCHANGED:  # an untouched TOASTed value: the old row has it with identity full
                    raw = old[i] if old is not None and old[i] is not pgoutput.UNCHANGED else None
                result.append(None if raw is None else converters[i](raw))  # type: ignore[arg-type]
            return result

        for lsn, data in rows:
            message = pgoutput.decode(data)
            if isinstance(message, pgoutput.Begin):
                pending, commit_ts = [], message.commit_ts
            elif isinstance(message, pgoutput.Commit):
                if message.end_lsn > end:
                    break  # past the batch: never happens with upto_lsn at a commit's end; the next batch has it
                if message.end_lsn > start:
                    for change in pending:
                        for column, value in zip(out, change, strict=True):
                            column.append(value)
                    count += len(pending)
                pending = []
                if count >= BATCH_ROWS:
                    yield self._batch(out)
                    out, count = [[] for _ in range(width + 4)], 0
            elif isinstance(message, pgoutput.Relation):
                relations[message.relation_id] = message
                if (message.namespace, message.name) == (self.config.table.schema, self.config.table.name):
                    self._check_relation(message, lsn)
                    ours.add(message.relation_id)
            elif isinstance(message, (pgoutput.Insert, pgoutput.Update, pgoutput.Delete)):
                if message.relation_id not in ours:
                    if message.relation_id not in relations:
                        raise DataError(f"pgoutput change at {pgoutput.format_lsn(lsn)} for relation "
                                        f"{message.relation_id} without its Relation message")
                    continue  # another table of the publication
                if isinstance(message, pgoutput.Insert):
                    row = values(message.new, None)
                    op = "c"
                elif isinstance(message, pgoutput.Update):
                    row = values(message.new, message.old)
                    op = "u"
                else:
                    row = values(message.old, None)
                    op = "d"
                pending.append((*row, op, lsn, commit_ts, self.table_label))
            elif isinstance(message, pgoutput.Truncate):
                if ours.intersection(message.relation_ids):
                    raise CdcError(f"TRUNCATE of {self.table_label} at {pgoutput.format_lsn(lsn)}: a change stream "
                                   f"has no row for it; publish without truncate (publish = 'insert, update, "
                                   f"delete') or re-snapshot into a new slot")
            # Origin, Type and logical messages carry no row
        if count:
            yield self._batch(out)

    def _check_relation(self, relation: pgoutput.Relation, lsn: int) -> None:
        names = [c.name for c in relation.columns]
        if names == self.table_columns:
            for column, oid in zip(relation.columns, self.type_oids, strict=True):
                if column.type_oid != oid:
                    raise CdcError(f"table {self.table_label} changed at {pgoutput.format_lsn(lsn)}: column "
                                   f"'{column.name}' changed its type (oid {oid} -> {column.type_oid}); "
                                   + RESTART_HINT)
            return
        added = [n for n in names if n not in self.table_columns]
        dropped = [n for n in self.table_columns if n not in names]
        what = (f"column '{added[0]}' was added" if added else f"column '{dropped[0]}' was dropped" if dropped
                else f"its columns are now {', '.join(names)}")
        raise CdcError(f"table {self.table_label} changed at {pgoutput.format_lsn(lsn)}: {what}; " + RESTART_HINT)

    def _batch(self, columns: list[list[Any]]) -> pa.RecordBatch:
        arrays = [pa.array(values, type=field.type) for values, field in zip(columns, self.arrow_schema, strict=True)]
        return pa.RecordBatch.from_arrays(arrays, schema=self.arrow_schema)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
