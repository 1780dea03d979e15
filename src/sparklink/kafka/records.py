"""The rows of Spark's Kafka source, built column-wise as Arrow record batches (executor side).

Columns and types are those of Spark's own Kafka source: ``key`` binary, ``value`` binary,
``topic`` string, ``partition`` int, ``offset`` long, ``timestamp`` timestamp, ``timestampType``
int (0 create time, 1 log-append time) and, with ``includeHeaders``, ``headers``
array<struct<key string, value binary>>. One record batch is built per ``consume`` call.

This is the source's hot path: each column is one pass of a C-level ``map`` over the client's
message objects (no Python bytecode per message), converted by one ``pa.array`` call; the
columns that are the same for the whole batch (topic, partition) are repeated scalars, and the
timestamp columns are derived with Arrow kernels.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from operator import itemgetter
from typing import cast

import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import TIMESTAMP_NOT_AVAILABLE, Message
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

HEADER_TYPE = pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))
TIMESTAMP_TYPE = pa.timestamp("us", tz="UTC")
_first, _second = itemgetter(0), itemgetter(1)
COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers")


def source_schema(include_headers: bool) -> StructType:
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        fields.append(StructField("headers", ArrayType(StructType([StructField("key", StringType()),
                                                                   StructField("value", BinaryType())]))))
    return StructType(fields)


def first_error(messages: Sequence[Message]):
    """The first error a ``consume`` call returned among its messages, or None (one C-level pass)."""
    return next(filter(None, map(Message.error, messages)), None)


def record_offset(message: Message) -> int:
    """The offset of a consumed record (the stub's None is for a message not from a broker)."""
    offset = message.offset()
    assert offset is not None  # every record a consumer returns has its offset
    return offset


def _timestamp_columns(messages: Sequence[Message]) -> tuple[pa.Array, pa.Array]:
    """``timestamp`` (microseconds, UTC) and ``timestampType`` (librdkafka's 1 create time /
    2 log-append time as Spark's 0 / 1; both null where the broker gave no timestamp)."""
    pairs = list(map(Message.timestamp, messages))
    kinds = list(map(_first, pairs))
    micros = pc.multiply(pa.array(map(_second, pairs), pa.int64(), size=len(pairs)), 1000).cast(TIMESTAMP_TYPE)
    spark_kind = pc.subtract(pa.array(kinds, pa.int32()), pa.scalar(1, pa.int32()))
    if kinds.count(kinds[0]) == len(kinds) and kinds[0] != TIMESTAMP_NOT_AVAILABLE:
        return micros, spark_kind  # the usual case: one kind of timestamp for the whole batch
    available = pc.not_equal(pa.array(kinds, pa.int32()), TIMESTAMP_NOT_AVAILABLE)
    return (pc.if_else(available, micros, pa.scalar(None, TIMESTAMP_TYPE)),
            pc.if_else(available, spark_kind, pa.scalar(None, pa.int32())))


def _headers(messages: Sequence[Message]) -> pa.Array:
    # a consumed message's headers are a list of (key, value) pairs (the stub's type also allows the
    # dict a producer may be given)
    return pa.array([[{"key": k, "value": v} for k, v in cast("list[tuple[str, bytes | None]]", m.headers() or ())]
                     for m in messages], HEADER_TYPE)


def to_record_batch(messages: Sequence[Message], topic: str, partition: int, *, include_headers: bool,
                    names: Sequence[str]) -> pa.RecordBatch:
    """One Arrow record batch from messages of one partition, in the column order of ``names``."""
    missing = [name for name in names if name not in COLUMNS or (name == "headers" and not include_headers)]
    if missing:
        raise ValueError(f"the Kafka source has no column(s) {missing}; its columns are {list(COLUMNS)}")
    count = len(messages)
    if count == 0:
        return pa.RecordBatch.from_pylist([], schema=record_schema(names))
    timestamp, timestamp_type = _timestamp_columns(messages)
    build = {
        "key": lambda: pa.array(list(map(Message.key, messages)), pa.binary()),
        "value": lambda: pa.array(list(map(Message.value, messages)), pa.binary()),
        "topic": lambda: pa.repeat(pa.scalar(topic, pa.string()), count),
        "partition": lambda: pa.repeat(pa.scalar(partition, pa.int32()), count),
        "offset": lambda: pa.array(list(map(Message.offset, messages)), pa.int64()),
        "timestamp": lambda: timestamp,
        "timestampType": lambda: timestamp_type,
        "headers": lambda: _headers(messages),
    }
    return pa.RecordBatch.from_arrays([build[name]() for name in names], names=list(names))


def record_schema(names: Sequence[str]) -> pa.Schema:
    """The Arrow schema of the record batches for the columns ``names``."""
    types = {"key": pa.binary(), "value": pa.binary(), "topic": pa.string(), "partition": pa.int32(),
             "offset": pa.int64(), "timestamp": TIMESTAMP_TYPE, "timestampType": pa.int32(), "headers": HEADER_TYPE}
    return pa.schema([pa.field(name, types[name]) for name in names])


# -- the sink's records of writeMode=upsert (executor side) --------------------------------------

def encode_keys(rows: pa.Table, key_columns: Sequence[str]) -> pa.Array:
    """The record key of each row, from ``keyColumns``: one column -> its value as UTF-8 text
    (a string as is, a binary column's bytes as they are, a number or date as Spark's cast to
    string writes it, e.g. ``42``); several -> a compact JSON object in ``keyColumns`` order,
    e.g. ``{"tenant":"a","id":42}`` (values as JSON numbers, strings, booleans; others as text)."""
    if len(key_columns) == 1:
        column = rows.column(key_columns[0])
        if pa.types.is_binary(column.type) or pa.types.is_large_binary(column.type):
            return column.combine_chunks().cast(pa.binary())
        return pc.cast(pc.cast(column, pa.string()), pa.binary()).combine_chunks()
    columns = [rows.column(name).to_pylist() for name in key_columns]
    return pa.array([json.dumps(dict(zip(key_columns, values, strict=True)), separators=(",", ":"), default=str,
                                ensure_ascii=False).encode()
                     for values in zip(*columns, strict=True)], pa.binary())


def changelog_records(changes, key_columns: Sequence[str], passed: Sequence[str]) -> pa.RecordBatch:
    """One reduced batch of changes (a :class:`~sparklink.sink.changelog.ChangeSet`) as the
    sink's records: ``key`` from ``key_columns``, ``value`` the row's ``value`` column for an
    upsert and null (a tombstone, which log compaction reads as a delete) for a delete, and the
    ``passed`` columns (``topic``, ``partition``, ``headers`` when present) as they are."""
    rows = changes.rows
    value = rows.column("value").combine_chunks()
    deletes = changes.deletes
    if isinstance(deletes, pa.ChunkedArray):
        deletes = deletes.combine_chunks()
    arrays = [encode_keys(rows, key_columns), pc.if_else(deletes, pa.scalar(None, value.type), value)]
    names = ["key", "value"]
    for name in passed:
        arrays.append(rows.column(name).combine_chunks())
        names.append(name)
    return pa.RecordBatch.from_arrays(arrays, names=names)
