"""The rows of Spark's Kafka source, built column-wise as Arrow record batches (executor side).

Columns and types are those of Spark's own Kafka source: ``key`` binary, ``value`` binary,
``topic`` string, ``partition`` int, ``offset`` long, ``timestamp`` timestamp, ``timestampType``
int (0 create time, 1 log-append time) and, with ``includeHeaders``, ``headers``
array<struct<key string, value binary>>. One record batch is built per ``consume`` call.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
from confluent_kafka import TIMESTAMP_NOT_AVAILABLE, Message
from pyspark.sql.types import (ArrayType, BinaryType, IntegerType, LongType, StringType, StructField, StructType,
                               TimestampType)

HEADER_TYPE = pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))


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


def _timestamp_type(kind: int) -> int | None:
    """librdkafka's 1 (create time) / 2 (log-append time) as Spark's 0 / 1."""
    return None if kind == TIMESTAMP_NOT_AVAILABLE else kind - 1


def to_record_batch(messages: Sequence[Message], topic: str, partition: int, *, include_headers: bool,
                    names: Sequence[str]) -> pa.RecordBatch:
    """One Arrow record batch from messages of one partition, in the column order of ``names``."""
    count = len(messages)
    timestamps = [m.timestamp() for m in messages]
    columns = {
        "key": pa.array([m.key() for m in messages], pa.binary()),
        "value": pa.array([m.value() for m in messages], pa.binary()),
        "topic": pa.array([topic] * count, pa.string()),
        "partition": pa.array([partition] * count, pa.int32()),
        "offset": pa.array([m.offset() for m in messages], pa.int64()),
        "timestamp": pa.array([ms * 1000 if kind != TIMESTAMP_NOT_AVAILABLE else None for kind, ms in timestamps],
                              pa.int64()).cast(pa.timestamp("us", tz="UTC")),
        "timestampType": pa.array([_timestamp_type(kind) for kind, _ in timestamps], pa.int32()),
    }
    if include_headers:
        columns["headers"] = pa.array(
            [[{"key": k, "value": v} for k, v in (m.headers() or [])] for m in messages], HEADER_TYPE)
    missing = [name for name in names if name not in columns]
    if missing:
        raise ValueError(f"the Kafka source has no column(s) {missing}; its columns are {sorted(columns)}")
    return pa.RecordBatch.from_arrays([columns[name] for name in names], names=list(names))
