"""The ``sparklink.postgres-cdc`` reader (executor side): snapshot chunks and log ranges.

*Snapshot chunk*: one primary-key range of a table, read with ``COPY (SELECT ...)`` (one
statement: one consistent view of the chunk) when the task runs, after the slot's creation.
Rows get ``_op`` = ``r`` and ``_lsn`` = 0: every change of the log (read from the slot's start
after the snapshot) sorts after them, see :mod:`sparklink.postgres.cdc_enumerator`.

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
import pyarrow.compute as pc
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
    StringType,
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


def _casts(value: bytes, arrow_type: pa.DataType) -> bool:
    try:
        pa.array([value.decode("utf-8", errors="replace")]).cast(arrow_type)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return False
    return True


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

    def __init__(self, config: CdcConfig, schema: StructType, table_columns: list[str], type_oids: list[int],
                 key_columns: list[list[str]]):
        self.config = config
        self.schema = schema
        self.table_columns = table_columns
        self.type_oids = type_oids
        self.key_columns = key_columns
        self.arrow_schema = to_arrow_schema(schema, timezone="UTC")
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
        index = state["table"]
        table, label = self.config.tables[index], self.config.label(index)
        conn = self._connect(autocommit=True)
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
        columns += [sql.SQL("'r'"), sql.SQL("0::bigint"), sql.SQL("NULL::text"), sql.Literal(label)]
        query = sql.SQL("SELECT {} FROM {} WHERE {}").format(sql.SQL(", ").join(columns), table.identifier, where)
        try:
            yield from copy_out(conn.cursor(), query, self.arrow_schema, params)
        except psycopg.Error as exc:
            raise self.config.connection.error(f"reading snapshot chunk {split.split_id} of {label}", exc) from None

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
        """pgoutput messages -> record batches. Per change only the raw text values are kept (one
        list per column); :meth:`_batch` converts whole columns with Arrow casts."""
        width = len(self.table_columns)
        wanted = {(t.schema, t.name): i for i, t in enumerate(self.config.tables)}
        relations: dict[int, pgoutput.Relation] = {}
        ours: dict[int, int] = {}  # relation id -> index in config.tables
        columns: list[list[Any]] = [[] for _ in range(width + 4)]
        pending: list[tuple[Any, ...]] = []
        commit_ts: dt.datetime | None = None
        count = 0

        def raw_values(tuple_data: tuple[object, ...], old: tuple[object, ...] | None) -> tuple[object, ...]:
            if pgoutput.UNCHANGED not in tuple_data:
                return tuple_data
            # an untouched TOASTed value: the old row has it with replica identity full, NULL otherwise
            return tuple((old[i] if old is not None and old[i] is not pgoutput.UNCHANGED else None)
                         if value is pgoutput.UNCHANGED else value for i, value in enumerate(tuple_data))

        for lsn, data in rows:
            message = pgoutput.decode(data)
            if isinstance(message, (pgoutput.Insert, pgoutput.Update, pgoutput.Delete)):
                index = ours.get(message.relation_id)
                if index is None:
                    if message.relation_id not in relations:
                        raise DataError(f"pgoutput change at {pgoutput.format_lsn(lsn)} for relation "
                                        f"{message.relation_id} without its Relation message")
                    continue  # another table of the publication
                label = self.config.label(index)
                if isinstance(message, pgoutput.Insert):
                    pending.append((raw_values(message.new, None), "c", lsn, label))
                elif isinstance(message, pgoutput.Update):
                    new = raw_values(message.new, message.old)
                    old_key = self._changed_key(index, message.old, new)
                    if old_key is not None:
                        # the primary key changed: the row under the old key is gone (Debezium's delete + create)
                        pending.append((old_key, "d", lsn, label))
                        pending.append((new, "c", lsn, label))
                    else:
                        pending.append((new, "u", lsn, label))
                else:
                    pending.append((message.old, "d", lsn, label))
            elif isinstance(message, pgoutput.Begin):
                pending, commit_ts = [], message.commit_ts
            elif isinstance(message, pgoutput.Commit):
                if message.end_lsn > end:
                    break  # past the batch: never happens with upto_lsn at a commit's end; the next batch has it
                if message.end_lsn > start:
                    for values, op, change_lsn, label in pending:
                        for i in range(width):
                            columns[i].append(values[i])
                        columns[width].append(op)
                        columns[width + 1].append(change_lsn)
                        columns[width + 2].append(commit_ts)
                        columns[width + 3].append(label)
                    count += len(pending)
                pending = []
                if count >= BATCH_ROWS:
                    yield self._batch(columns)
                    columns, count = [[] for _ in range(width + 4)], 0
            elif isinstance(message, pgoutput.Relation):
                relations[message.relation_id] = message
                index = wanted.get((message.namespace, message.name))
                if index is not None:
                    self._check_relation(message, lsn, self.config.label(index))
                    ours[message.relation_id] = index
            elif isinstance(message, pgoutput.Truncate):
                hit = [ours[r] for r in message.relation_ids if r in ours]
                if hit:
                    raise CdcError(f"TRUNCATE of {self.config.label(hit[0])} at {pgoutput.format_lsn(lsn)}: a change "
                                   f"stream has no row for it; publish without truncate (publish = 'insert, update, "
                                   f"delete') or re-snapshot into a new slot")
            # Origin, Type and logical messages carry no row
        if count:
            yield self._batch(columns)

    def _changed_key(self, index: int, old: tuple[object, ...] | None,
                     new: tuple[object, ...]) -> tuple[object, ...] | None:
        """The old row's key values (others NULL) when an update changed the primary key, else None.
        pgoutput sends the old key only when it changed (or the whole old row with identity full)."""
        if old is None or not self.key_columns[index]:
            return None
        positions = [self.table_columns.index(k) for k in self.key_columns[index]]
        if all(old[i] is pgoutput.UNCHANGED or old[i] == new[i] for i in positions):
            return None
        return tuple(old[i] if i in positions else None for i in range(len(new)))

    def _check_relation(self, relation: pgoutput.Relation, lsn: int, label: str) -> None:
        names = [c.name for c in relation.columns]
        if names == self.table_columns:
            for column, oid in zip(relation.columns, self.type_oids, strict=True):
                if column.type_oid != oid:
                    raise CdcError(f"table {label} changed at {pgoutput.format_lsn(lsn)}: column "
                                   f"'{column.name}' changed its type (oid {oid} -> {column.type_oid}); "
                                   + RESTART_HINT)
            return
        added = [n for n in names if n not in self.table_columns]
        dropped = [n for n in self.table_columns if n not in names]
        what = (f"column '{added[0]}' was added" if added else f"column '{dropped[0]}' was dropped" if dropped
                else f"its columns are now {', '.join(names)}")
        raise CdcError(f"table {label} changed at {pgoutput.format_lsn(lsn)}: {what}; " + RESTART_HINT)

    def _batch(self, columns: list[list[Any]]) -> pa.RecordBatch:
        width = len(self.table_columns)
        arrays = [self._column(self.table_columns[i], columns[i], self.arrow_schema.field(i).type)
                  for i in range(width)]
        arrays += [pa.array(values, type=self.arrow_schema.field(width + i).type)
                   for i, values in enumerate(columns[width:])]
        return pa.RecordBatch.from_arrays(arrays, schema=self.arrow_schema)

    def _column(self, name: str, raw: list[Any], arrow_type: pa.DataType) -> pa.Array:
        """One column of text values (bytes, None) as ``arrow_type``: an Arrow cast of the whole
        column where Arrow parses PostgreSQL's text form exactly (integers, floats, dates,
        timestamps in the session's UTC, text, decimals of the column's scale); per value in Python
        otherwise (booleans, bytea's hex, decimals to round)."""
        data_type = self.schema[name].dataType
        if isinstance(data_type, (ByteType, ShortType, IntegerType, LongType, FloatType, DoubleType, DateType,
                                  TimestampType, TimestampNTZType, DecimalType, StringType)):
            text = pa.array(raw, type=pa.binary()).cast(pa.string())
            if isinstance(data_type, StringType):
                return text
            try:
                return text.cast(arrow_type)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                if not isinstance(data_type, DecimalType):
                    bad = next((v for v in raw if v is not None and not _casts(v, arrow_type)), None)
                    raise DataError(f"column '{name}': value {bad!r} has no {data_type.simpleString()} form") from None
        if isinstance(data_type, BooleanType):
            return pc.equal(pa.array(raw, type=pa.binary()), pa.scalar(b"t", pa.binary()))
        convert = _converter(data_type, name)
        return pa.array([None if v is None else convert(v) for v in raw], type=arrow_type)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
