"""Partition values exact in Delta's log (doubles, binary) and the table's invariants (NOT NULL,
CHECK constraints, generated columns, column mapping) before anything is committed. The sink is
driven as Spark's adapter drives a ``df.write`` job, without Spark; tables are read by delta-rs."""

from __future__ import annotations

import json
import math
import uuid
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from pyspark.sql.types import BinaryType, DoubleType, LongType, StructField, StructType

from sparklink.delta.sink import DeltaSink
from sparklink.errors import DataError
from sparklink.sink import WriterContext
from sparklink.sink.protocol import commit_batch


def write_job(options: dict, schema: StructType, columns: dict, partitions: int = 1) -> None:
    """One ``df.write`` job as Spark's adapter runs it: ``partitions`` tasks (rows dealt round
    robin), then the driver's commit."""
    sink = DeltaSink(options, schema)
    sink.prepare_tasks()
    job_id = uuid.uuid4().hex
    committables = []
    names = [f.name for f in schema.fields]
    batch = pa.RecordBatch.from_pydict(columns, schema=pa.schema([sink.arrow_schema.field(n) for n in names]))
    for partition in range(partitions):
        context = WriterContext(partition_id=partition, attempt_number=0, task_attempt_id=partition, job_id=job_id,
                                batch_id=None, query_id=None)
        writer = sink.create_writer(context)
        try:
            indices = pa.array(range(partition, batch.num_rows, partitions), pa.int64())
            writer.write_batch(batch.take(indices))
            writer.flush()
            committables += writer.prepare_commit()
        except BaseException:
            writer.abort()
            raise
        finally:
            writer.close()
    commit_batch(sink, None, job_id, committables)


def _log_partition_values(table: Path) -> list[dict]:
    return [json.loads(line)["add"]["partitionValues"] for entry in sorted((table / "_delta_log").glob("*.json"))
            for line in entry.read_text().splitlines() if '"add"' in line]


DOUBLES = StructType([StructField("id", LongType()), StructField("d", DoubleType())])


def test_double_partition_values_nan_and_signed_zeros_each_once(tmp_path):
    table = tmp_path / "t"
    values = [0.0, -0.0, math.nan, 1.5, math.inf, None]
    write_job({"path": str(table), "partitionColumns": "d"}, DOUBLES,
              {"id": list(range(len(values))), "d": values}, partitions=2)
    rows = sorted(DeltaTable(str(table)).to_pyarrow_table().to_pylist(), key=lambda r: r["id"])
    assert [r["id"] for r in rows] == list(range(len(values)))
    read = [r["d"] for r in rows]
    assert read[0] == 0.0 and math.copysign(1, read[0]) == 1 and read[1] == 0.0 and math.copysign(1, read[1]) == -1
    assert math.isnan(read[2]) and read[3:] == [1.5, math.inf, None]
    assert sorted((v["d"] is None, v["d"] or "") for v in _log_partition_values(table)) == \
        [(False, t) for t in sorted(["0.0", "-0.0", "NaN", "1.5", "Infinity"])] + [(True, "")]


BINARY = StructType([StructField("id", LongType()), StructField("b", BinaryType())])


def test_binary_partition_values_are_the_text_of_their_bytes(tmp_path):
    table = tmp_path / "t"
    write_job({"path": str(table), "partitionColumns": "b"}, BINARY, {"id": [1, 2, 3], "b": [b"ab", "é".encode(), b"ab"]})
    assert sorted(v["b"] for v in _log_partition_values(table)) == ["ab", "é"]
    rows = sorted(DeltaTable(str(table)).to_pyarrow_table().to_pylist(), key=lambda r: r["id"])
    assert [r["b"] for r in rows] == [b"ab", "é".encode(), b"ab"]
    with pytest.raises(DataError, match=r"partition column 'b': the binary value b'\\xff\\x00' is not UTF-8"):
        write_job({"path": str(table), "partitionColumns": "b"}, BINARY, {"id": [4], "b": [b"\xff\x00"]})
    assert DeltaTable(str(table)).version() == 1  # nothing committed by the refused write
