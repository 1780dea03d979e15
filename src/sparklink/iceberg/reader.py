"""Executor side of the ``sparklink.iceberg`` source: one data file per split, as Arrow batches.

The split names the table metadata file the driver planned with, the manifest and entry of the
data file, and the file's path. The reader loads both (cached per worker process: they are
immutable), rebuilds the ``DataFile`` and reads it with pyiceberg's ``ArrowScan``, which projects
the file onto the stream's Iceberg schema by field id (name mapping for files without ids,
identity partition values for columns a file lacks, type promotion), one record batch at a
time. Position delete files are applied there; equality delete files the split names are applied
to each batch next (:mod:`sparklink.iceberg.equality`). Batches are then cast to the Spark
schema's Arrow types (``large_string`` -> ``string`` ...).
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa

from sparklink.errors import DataError
from sparklink.iceberg.equality import equality_deletes
from sparklink.iceberg.scan import data_file, table_metadata
from sparklink.source import SourceReader, Split


class IcebergReader(SourceReader):
    def __init__(self, iceberg_schema_json: str, arrow_schema: pa.Schema, io_properties: dict[str, str]):
        self.iceberg_schema_json = iceberg_schema_json
        self.arrow_schema = arrow_schema
        self.io_properties = dict(io_properties)

    def read(self, split: Split) -> Iterator[pa.RecordBatch]:
        from pyiceberg.expressions import AlwaysTrue
        from pyiceberg.io import load_file_io
        from pyiceberg.io.pyarrow import ArrowScan, _read_all_delete_files
        from pyiceberg.schema import Schema
        from pyiceberg.table import FileScanTask

        state = split.state
        metadata = table_metadata(state["metadata"], self.io_properties)
        file = data_file(state["manifest"], state["spec"], state["entry"], state["path"], self.io_properties)
        projected = Schema.model_validate_json(self.iceberg_schema_json)
        io = load_file_io(self.io_properties, state["path"])
        scan = ArrowScan(metadata, io, projected, AlwaysTrue())
        task = FileScanTask(file, delete_files={position_delete_file(path) for path in state.get("deletes", [])})
        deletes = _read_all_delete_files(io, [task]) if task.delete_files else {}
        equality = equality_deletes(state["metadata"], state.get("equality", []), self.iceberg_schema_json,
                                    self.io_properties)
        rows = 0
        # ArrowScan.to_record_batches collects each file's batches in a list before yielding
        # them; its per-file generator (pinned pyiceberg 0.12.0) yields them as they are read, so
        # a task holds one batch, not a whole data file. Position deletes are applied there.
        for batch in scan._record_batches_from_scan_tasks_and_deletes([task], deletes):
            rows += batch.num_rows  # before equality deletes: checked against the manifest below
            if equality:
                batch = equality.apply(batch)
                if not batch.num_rows:
                    continue
            yield self._to_spark(batch, state["path"])
        deleted = sum(len(positions) for positions in deletes.get(state["path"], []))
        if rows != state["rows"] and not (deletes and state["rows"] - deleted <= rows <= state["rows"]):
            raise DataError(f"Iceberg data file {state['path']}: read {rows} rows, its manifest says {state['rows']}"
                            + (f" less at most {deleted} deleted position(s)" if deletes else ""))

    def _to_spark(self, batch: pa.RecordBatch, path: str) -> pa.RecordBatch:
        columns = []
        for field in self.arrow_schema:
            index = batch.schema.get_field_index(field.name)
            if index < 0:
                raise DataError(f"Iceberg data file {path}: no column '{field.name}' after projection onto the "
                                f"table's schema (has {', '.join(batch.schema.names)})")
            column = batch.column(index)
            columns.append(column if column.type == field.type else column.cast(field.type))
        return pa.RecordBatch.from_arrays(columns, schema=self.arrow_schema)


def position_delete_file(path: str):
    """A position delete file as pyiceberg's delete reader needs it (its path and format)."""
    from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
    from pyiceberg.typedef import Record

    return DataFile.from_args(content=DataFileContent.POSITION_DELETES, file_path=path, file_format=FileFormat.PARQUET,
                              partition=Record(), record_count=0, file_size_in_bytes=0, equality_ids=None,
                              key_metadata=None, sort_order_id=None)
