"""What the ``sparklink.iceberg`` source's planning process imports and reads, without Spark:
the Spark schema of every Iceberg type against pyiceberg's Arrow route (the types the readers
cast to), and the planning FileIO (local files read by Python, other schemes and a catalog's own
``py-io-impl`` left to pyiceberg, writes refused)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from pyiceberg import types as T
from pyiceberg.schema import Schema

from sparklink.errors import DataError, StorageError
from sparklink.iceberg.planning_io import PlanningFileIO
from sparklink.iceberg.spark_schema import spark_schema_of
from sparklink.storage.location import local_file_path
from tests.iceberg.iceberg_readers import catalog_options
from tests.iceberg.source_tables import append_snapshots

PRIMITIVES = [T.BooleanType(), T.IntegerType(), T.LongType(), T.FloatType(), T.DoubleType(), T.DecimalType(10, 2),
              T.DecimalType(38, 0), T.DateType(), T.TimeType(), T.TimestampType(), T.TimestamptzType(),
              T.TimestampNanoType(), T.TimestamptzNanoType(), T.StringType(), T.FixedType(5), T.BinaryType(),
              T.GeometryType(), T.GeographyType()]


def nested_types():
    yield T.StructType(T.NestedField(1, "a", T.IntegerType(), required=True),
                       T.NestedField(2, "b", T.StringType(), required=False))
    for required in (True, False):
        yield T.ListType(3, T.LongType(), element_required=required)
        yield T.MapType(4, T.StringType(), 5, T.DecimalType(9, 3), value_required=required)
    yield T.ListType(6, T.StructType(T.NestedField(7, "when", T.TimestamptzType(), required=False)))
    yield T.MapType(8, T.IntegerType(), 9, T.ListType(10, T.FixedType(3), element_required=False))


def through_arrow(schema: Schema):
    """The route the source took before: pyiceberg's Arrow schema, read by PySpark."""
    from pyiceberg.io.pyarrow import schema_to_pyarrow
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(schema_to_pyarrow(schema, include_field_ids=False))


def test_every_iceberg_type_has_the_spark_type_of_pyicebergs_arrow_route():
    fields, field_id = [], 100
    for field_type in [*PRIMITIVES, *nested_types()]:
        for required in (True, False):
            field_id += 1
            fields.append(T.NestedField(field_id, f"c{field_id}", field_type, required=required, doc="a column"))
    fields.append(T.NestedField(999, "nothing", T.UnknownType(), required=False))
    schema = Schema(*fields)
    assert spark_schema_of(schema, "db.types") == through_arrow(schema)


@pytest.mark.parametrize("field_type", [T.UUIDType(), T.StructType(T.NestedField(1, "id", T.UUIDType(), required=True)),
                                        T.ListType(2, T.UUIDType())], ids=["uuid", "struct", "list"])
def test_a_column_spark_has_no_type_for_is_refused_by_name(field_type):
    schema = Schema(T.NestedField(1, "ok", T.LongType()), T.NestedField(3, "key", field_type))
    with pytest.raises(TypeError):  # pyspark refuses it on the Arrow route too
        through_arrow(schema)
    with pytest.raises(DataError, match=r"Iceberg table db\.t: column 'key' of type .*uuid.* has no Spark type"):
        spark_schema_of(schema, "db.t")


def test_local_locations_are_read_by_python_and_others_left_to_pyiceberg(tmp_path):
    written = tmp_path / "metadata.json"
    written.write_bytes(b'{"format-version": 2}')
    io = PlanningFileIO({})
    for location in (str(written), f"file://{written}", f"file:{written}"):
        assert local_file_path(location) == str(written)
        found = io.new_input(location)
        assert (found.exists(), len(found)) == (True, written.stat().st_size)
        with found.open() as stream:
            assert json.load(stream) == {"format-version": 2}
    missing = io.new_input(f"file://{tmp_path}/gone.avro")
    assert not missing.exists()
    with pytest.raises(FileNotFoundError, match="gone.avro"):
        missing.open()
    assert local_file_path(f"file://localhost{written}") == str(written)
    assert local_file_path("file://host/share/metadata.json") is None and local_file_path("s3://bucket/m.json") is None
    s3 = io.new_input("s3://bucket/warehouse/m.json")
    assert type(s3).__module__ == "pyiceberg.io.pyarrow"  # what pyiceberg chooses for s3


def test_planning_never_writes(tmp_path):
    io = PlanningFileIO({})
    with pytest.raises(StorageError, match="only reads; it was asked to write .*x.avro"):
        io.new_output(str(tmp_path / "x.avro"))
    with pytest.raises(StorageError, match="only reads; it was asked to delete .*x.avro"):
        io.delete(str(tmp_path / "x.avro"))


def test_the_source_plans_with_the_planning_io_unless_the_catalog_names_one(tmp_path):
    from sparklink.iceberg.source import IcebergSource

    options = catalog_options(tmp_path / "t", "db.events")
    append_snapshots(options, 2, 5)
    assert type(IcebergSource(options).config.load_table().io) is PlanningFileIO
    named = {**options, "catalog.py-io-impl": "pyiceberg.io.pyarrow.PyArrowFileIO"}
    assert type(IcebergSource(named).config.load_table().io).__name__ == "PyArrowFileIO"


PLAN_IN_A_FRESH_PROCESS = """
import json, sys
import pyspark.sql.streaming.python_streaming_source_runner  # what PySpark's planning process imports
from sparklink.iceberg.source import IcebergSource
source = IcebergSource(json.loads(sys.argv[1]))
enumerator = source.create_enumerator(streaming=True)
start = enumerator.initial_offset()
splits = enumerator.plan_splits(start, enumerator.available_now_offset(start))
source.create_reader(source.schema())
print(json.dumps({"splits": len(splits), "imported": sorted(m for m in ("pandas", "pyarrow.dataset", "pyiceberg.io.pyarrow")
                                                          if m in sys.modules)}))
"""


def test_a_streaming_plan_imports_neither_pandas_nor_pyarrow_dataset(tmp_path):
    """PySpark starts a planning process per streaming query: what it imports is paid per query."""
    options = catalog_options(tmp_path / "t", "db.events")
    append_snapshots(options, 3, 10)
    src = Path(__file__).resolve().parents[2] / "src"
    done = subprocess.run([sys.executable, "-c", PLAN_IN_A_FRESH_PROCESS, json.dumps(options)], capture_output=True,
                          text=True, env={"PYTHONPATH": str(src), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"splits": 3, "imported": []}

