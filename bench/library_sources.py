"""The table libraries' own streaming sources (benchmark side): the most direct Python streaming
source a user could write on pyiceberg or deltalake, with no sparklink code, as a floor for the
``sparklink.iceberg`` and ``sparklink.delta`` sources.

``bench.pyiceberg`` and ``bench.deltalake`` are PySpark Python data sources (``DataSource`` +
``DataSourceStreamReader``). Their planning, in the Python process PySpark starts for each
streaming query, does what the library's documentation shows: ``load_catalog(...).load_table(...)``
and ``table.scan(snapshot_id=...).plan_files()`` for Iceberg; ``DeltaTable(path)`` and
``file_uris()`` for Delta. Their offset is the table's current snapshot id or version; the first
micro-batch reads the whole table, none after. Each of two tasks memory-maps half of the data
files (local warehouses only) and yields ``ParquetFile.iter_batches``. They apply no deletes and
refuse a table that has any (the benchmark tables have none), so they do less than sparklink's
sources. What they measure: the library's imports and calls in PySpark's planning process plus
the hand-over of pyarrow's decoded batches, the part of a Python table source that is not
sparklink's own.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import pyarrow as pa
from bench_file_source import FLOOR_BATCH_ROWS  # the floors' batch size, pickled with the readers by value

_registered: set[str] = set()


def _local(uri: str) -> str:
    from urllib.parse import unquote, urlparse

    parsed = urlparse(uri)
    if parsed.scheme not in ("", "file"):
        raise ValueError(f"the benchmark's library sources read local files only, not {uri}")
    return unquote(parsed.path) if parsed.scheme else uri


def _halves(paths: list[str]):
    from pyspark.sql.datasource import InputPartition

    paths = sorted(paths)
    return [InputPartition(paths[0::2]), InputPartition(paths[1::2])]


def _read(paths: list[str], schema) -> Iterator[pa.RecordBatch]:
    import pyarrow.parquet as pq
    from pyspark.sql.pandas.types import to_arrow_schema

    target = to_arrow_schema(schema, timezone="UTC")  # as PySpark checks the batches
    for path in paths:
        with pq.ParquetFile(path, memory_map=True) as handle:
            for batch in handle.iter_batches(batch_size=FLOOR_BATCH_ROWS, use_threads=False):
                yield batch if batch.schema.equals(target) else batch.cast(target)


def _iceberg_files(options: Mapping[str, str], snapshot: int | None) -> tuple[int, list[str]]:
    """(current snapshot id, its data files' local paths) through pyiceberg's catalog."""
    from pyiceberg.catalog import load_catalog

    properties = {key[len("catalog."):]: value for key, value in options.items()
                  if key.lower().startswith("catalog.") and key.lower() != "catalog.name"}
    table = load_catalog(options["catalog.name"], **properties).load_table(options["table"])
    if snapshot is None:
        return table.current_snapshot().snapshot_id, []
    tasks = list(table.scan(snapshot_id=snapshot).plan_files())
    if any(task.delete_files for task in tasks):
        raise ValueError("bench.pyiceberg applies no delete files; the table has some")
    return snapshot, [_local(task.file.file_path) for task in tasks]


def _delta_files(options: Mapping[str, str], version: int | None) -> tuple[int, list[str]]:
    """(current version, its data files' local paths) through deltalake."""
    from deltalake import DeltaTable

    if version is None:
        return DeltaTable(options["path"]).version(), []
    table = DeltaTable(options["path"], version=version)
    if "deletionVectors" in (table.protocol().reader_features or ()):
        raise ValueError("bench.deltalake applies no deletion vectors; the table may have some")
    return version, [_local(uri) for uri in table.file_uris()]


_LIBRARIES = {"pyiceberg": _iceberg_files, "deltalake": _delta_files}


def register(spark, library: str) -> None:
    """Register ``bench.<library>`` (``pyiceberg`` or ``deltalake``) with ``spark``."""
    if library in _registered:
        return
    import sys

    from pyspark import cloudpickle
    from pyspark.sql.datasource import DataSource, DataSourceStreamReader
    from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the workers cannot import bench/
    files_of = _LIBRARIES[library]

    class LibraryStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
        """Planning: the library in PySpark's planning process. Reading: executors."""

        def __init__(self, options, schema):
            self.options = options  # case-insensitive, as Spark passes them
            self.schema = schema
            self.head: int | None = None

        def prepareForTriggerAvailableNow(self):
            self.head = files_of(self.options, None)[0]

        def initialOffset(self):
            return {"at": -1}

        def latestOffset(self, start=None, limit=None):
            return {"at": self.head if self.head is not None else files_of(self.options, None)[0]}

        def partitions(self, start, end):
            if start["at"] == end["at"]:
                return []
            return _halves(files_of(self.options, end["at"])[1])

        def read(self, partition):
            return _read(partition.value, self.schema)

        def commit(self, end):
            pass

    class LibrarySource(DataSource):
        @classmethod
        def name(cls):
            return f"bench.{library}"

        def schema(self):
            return self.options["schema"]

        def streamReader(self, schema):
            return LibraryStreamReader(self.options, schema)

    spark.dataSource.register(LibrarySource)
    _registered.add(library)


def library_source_frame(spark, library: str, options: Mapping[str, str], ddl: str):
    """A streaming frame over ``bench.<library>`` with the table ``options`` (the Iceberg
    benchmark's ``table`` and ``catalog.*``; the Delta benchmark's ``path``) and Spark schema ``ddl``."""
    register(spark, library)
    return spark.readStream.format(f"bench.{library}").options(**options).option("schema", ddl).load()
