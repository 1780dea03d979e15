"""Partition values exact in Delta's log (doubles, binary) and the table's invariants (NOT NULL,
CHECK constraints, generated columns, column mapping) before anything is committed. The sink is
driven as Spark's adapter drives a ``df.write`` job, without Spark; tables are read by delta-rs."""

from __future__ import annotations

import json
import math
import uuid
from pathlib import Path
from urllib.parse import unquote

import pyarrow as pa
import pytest
from deltalake import DeltaTable, Field
from deltalake import Schema as DeltaSchema
from deltalake.schema import PrimitiveType
from pyspark.sql.types import BinaryType, DoubleType, LongType, StructField, StructType

from sparklink.delta.sink import DeltaSink
from sparklink.errors import ConfigError, DataError
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


IDS = StructType([StructField("id", LongType()), StructField("v", LongType())])


def _created(path: Path, *fields, configuration=None) -> DeltaTable:
    return DeltaTable.create(str(path), DeltaSchema(list(fields)), configuration=configuration)


def test_a_null_in_a_not_null_column_fails_the_write_and_commits_nothing(tmp_path):
    table = tmp_path / "t"
    _created(table, Field("id", PrimitiveType("long"), nullable=False), Field("v", PrimitiveType("long")))
    write_job({"path": str(table)}, IDS, {"id": [1, 2], "v": [None, 5]})
    with pytest.raises(DataError, match=r"column id violates NOT NULL \(1 of 3 rows of a batch are null\), e\.g\. "
                                        r"the row \{'id': None, 'v': 7\}"):
        write_job({"path": str(table)}, IDS, {"id": [3, None, 4], "v": [6, 7, 8]})
    assert DeltaTable(str(table)).version() == 1
    assert sorted(DeltaTable(str(table)).to_pyarrow_table().column("id").to_pylist()) == [1, 2]
    assert not [p for p in table.rglob("*.parquet") if "_delta_log" not in p.parts
                and p.relative_to(table).as_posix() not in
                {unquote(x) for x in DeltaTable(str(table)).get_add_actions(flatten=True).column("path").to_pylist()}]


@pytest.mark.parametrize(("setup", "feature"), [
    (lambda t: _created(t, Field("id", PrimitiveType("long")), Field("v", PrimitiveType("long")))
     .alter.add_constraint({"positive": "id > 0"}), r"CHECK constraints \(positive: id > 0\)"),
    (lambda t: _created(t, Field("id", PrimitiveType("long")),
                        Field("v", PrimitiveType("long"), metadata={"delta.generationExpression": "id * 2"})),
     r"a generated column \(v = id \* 2\)"),
    (lambda t: _created(t, Field("id", PrimitiveType("long")), Field("v", PrimitiveType("long")),
                        configuration={"delta.columnMapping.mode": "name"}), "column mapping"),
], ids=["check-constraint", "generated-column", "column-mapping"])
def test_a_table_with_an_invariant_the_sink_does_not_enforce_is_refused(tmp_path, setup, feature):
    table = tmp_path / "t"
    setup(table)
    version = DeltaTable(str(table)).version()
    with pytest.raises(ConfigError, match=f"option 'path': the Delta table .* uses {feature}.*nothing was written"):
        write_job({"path": str(table)}, IDS, {"id": [-5], "v": [7]})
    assert DeltaTable(str(table)).version() == version and DeltaTable(str(table)).to_pyarrow_table().num_rows == 0


def test_a_constraint_added_while_the_tasks_ran_refuses_the_commit(tmp_path):
    table = tmp_path / "t"
    write_job({"path": str(table)}, IDS, {"id": [1], "v": [1]})
    sink = DeltaSink({"path": str(table)}, IDS)
    sink.prepare_tasks()
    writer = sink.create_writer(WriterContext(partition_id=0, attempt_number=0, task_attempt_id=0, job_id="j",
                                              batch_id=None, query_id=None))
    writer.write_batch(pa.RecordBatch.from_pydict({"id": pa.array([-5], pa.int64()), "v": pa.array([2], pa.int64())}))
    writer.flush()
    committables = writer.prepare_commit()
    writer.close()
    DeltaTable(str(table)).alter.add_constraint({"positive": "id > 0"})
    with pytest.raises(ConfigError, match="CHECK constraints"):
        commit_batch(sink, None, "j", committables)
    assert DeltaTable(str(table)).to_pyarrow_table().column("id").to_pylist() == [1]


@pytest.mark.parametrize(("options", "problem"), [
    ({"partitionColumn": "v"}, r"option 'partitionColumn': unknown option \(did you mean 'partitionColumns'\?\)"),
    ({"partitionColumns": "nosuch"}, "option 'partitionColumns': column 'nosuch' is not in the input"),
], ids=["misspelt", "no-such-column"])
def test_validate_refuses_bad_options_without_touching_the_table(tmp_path, options, problem):
    """What ``sparklink run --check`` calls: the options checked against the input's columns."""
    with pytest.raises(ConfigError, match=problem):
        DeltaSink.validate({"path": str(tmp_path / "t"), **options}, IDS)
    DeltaSink.validate({"path": str(tmp_path / "t"), "partitionColumns": "v"}, IDS)
    assert not (tmp_path / "t").exists()


def test_a_write_without_partition_columns_takes_the_existing_tables(tmp_path):
    """docs/delta.md's stream (``partitionColumns=day``) and batch snippet (no option) on one
    path: the batch write appends in the table's partitioning."""
    table = tmp_path / "t"
    write_job({"path": str(table), "partitionColumns": "v"}, IDS, {"id": [1, 2], "v": [0, 1]})
    write_job({"path": str(table)}, IDS, {"id": [3, 4], "v": [0, 1]})
    assert sorted(DeltaTable(str(table)).to_pyarrow_table().to_pylist(), key=lambda r: r["id"]) == \
        [{"id": i, "v": v} for i, v in ((1, 0), (2, 1), (3, 0), (4, 1))]
    assert sorted(v["v"] for v in _log_partition_values(table)) == ["0", "0", "1", "1"]
    with pytest.raises(ConfigError, match="partitioned by"):
        write_job({"path": str(table), "partitionColumns": "id"}, IDS, {"id": [5], "v": [0]})


def test_a_stream_taking_the_tables_partition_columns_rolls_forward_after_a_crash(tmp_path, monkeypatch):
    """The roll-forward of a micro-batch logged before a crash runs before the restarted
    writer's tasks are prepared: the committer takes the partition columns the tasks wrote with
    from their files, not from the (absent) option."""
    from sparklink.errors import FaultInjected
    from sparklink.faults import ENV_FAULT
    from sparklink.testing.conformance.outputs import SEQUENCE_SCHEMA
    from sparklink.testing.conformance.sinks import run_micro_batch
    from sparklink.testing.faults import ENV_BATCH

    table = tmp_path / "t"
    run_micro_batch(DeltaSink({"path": str(table), "partitionColumns": "split",
                               "checkpointLocation": str(tmp_path / "ck-0")}, SEQUENCE_SCHEMA), 0, 2, "first")
    options = {"path": str(table), "checkpointLocation": str(tmp_path / "ck")}
    run_micro_batch(DeltaSink(options, SEQUENCE_SCHEMA), 1, 2, "job-1")
    with monkeypatch.context() as armed:
        armed.setenv(ENV_FAULT, "sink.after_log:raise")
        armed.setenv(ENV_BATCH, "2")
        with pytest.raises(FaultInjected):
            run_micro_batch(DeltaSink(options, SEQUENCE_SCHEMA), 2, 2, "job-2")
    run_micro_batch(DeltaSink(options, SEQUENCE_SCHEMA), 2, 3, "job-2-replayed")
    run_micro_batch(DeltaSink(options, SEQUENCE_SCHEMA), 3, 2, "job-3")
    rows = DeltaTable(str(table)).to_pyarrow_table()
    assert sorted(rows.column("id").to_pylist()) == list(range(40))
    assert all(set(v) == {"split"} for v in _log_partition_values(table))  # every file in the partitioning
