"""Equality delete files applied to a data file's batches (executor side of a batch read).

An equality delete file holds rows of its ``equality_ids`` columns (Iceberg field ids); it
deletes every row of the data files it applies to whose values in those columns equal one of
its rows, a null equal to a null (the spec's rule, not SQL's). Which files apply to which data
file (the delete's data sequence number strictly greater than the data file's, same partition
or a delete file of an unpartitioned spec) is decided on the driver
(:func:`sparklink.iceberg.scan.live_data_files`); this module reads the files a split names and
drops the matching rows, in Arrow:

* each delete file is read once per worker process (cached: delete files are immutable) with
  pyiceberg's ``ArrowScan``, projected by field id onto the equality columns of the schema the
  data file is read with, so both sides have the same Arrow types (a cast covers the rest);
* the files of one split with the same equality columns are concatenated and matched at once;
* one column: ``is_in`` with nulls matching nulls; several: each column is coded as its index in
  the delete file's distinct values (``index_in``, nulls matching nulls; a value the delete file
  lacks codes as null, which matches nothing), then the batch's codes are semi-joined with the
  delete rows' codes and the rows found are dropped, keeping the batch's order.
"""

from __future__ import annotations

from functools import lru_cache

import pyarrow as pa
import pyarrow.compute as pc

from sparklink.arrow_arrays import repeated, row_numbers
from sparklink.errors import DataError

_ROW = "__sparklink_row"


def _comparable(column):
    """The column as ``is_in`` / ``index_in`` / joins take it (extension types as their storage)."""
    if isinstance(column.type, pa.ExtensionType):
        return column.cast(column.type.storage_type) if isinstance(column, pa.ChunkedArray) else column.storage
    return column


class _DeleteKeys:
    """The delete rows of one set of equality columns, prepared once per batch schema."""

    def __init__(self, names: list[str], deletes: pa.Table):
        self.names = names
        self.deletes = deletes
        self._prepared: dict[tuple, tuple] = {}

    def _prepare(self, types: tuple) -> tuple:
        """(value set) for one column; (distinct values per column, delete rows as codes) for several."""
        columns = []
        for name, target in zip(self.names, types, strict=True):
            column = _comparable(self.deletes.column(name))
            column = column if column.type == target else column.cast(target)
            columns.append(column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column)
        if len(columns) == 1:
            return (columns[0],)
        values = [pc.unique(column) for column in columns]
        codes = [pc.index_in(column, value_set=distinct, skip_nulls=False)
                 for column, distinct in zip(columns, values, strict=True)]
        return values, pa.table(codes, names=[f"k{n}" for n in range(len(codes))])

    def matching_rows(self, batch_columns: list) -> pa.Array:
        """A boolean mask over the batch's rows: True where the row's values equal one delete
        row's (columns in ``names`` order; nulls equal nulls)."""
        data = [_comparable(column) for column in batch_columns]
        rows = len(data[0])
        if not self.deletes.num_rows:
            return repeated(False, pa.bool_(), rows)
        types = tuple(column.type for column in data)
        if types not in self._prepared:
            self._prepared[types] = self._prepare(types)
        prepared = self._prepared[types]
        if len(data) == 1:
            return pc.is_in(data[0], value_set=prepared[0], skip_nulls=False)
        values, right = prepared
        codes = [pc.index_in(column, value_set=distinct, skip_nulls=False)
                 for column, distinct in zip(data, values, strict=True)]
        positions = row_numbers(rows)
        left = pa.table([*codes, positions], names=[*right.column_names, _ROW])
        hits = left.join(right, keys=right.column_names, join_type="left semi", use_threads=False).column(_ROW)
        return pc.is_in(positions, value_set=hits.combine_chunks())


class EqualityDeletes:
    """The equality delete files one split applies, read and grouped by their equality columns."""

    def __init__(self, groups: list[tuple[list[str], pa.Table]]):
        self.groups = [_DeleteKeys(names, deletes) for names, deletes in groups]

    def __bool__(self) -> bool:
        return bool(self.groups)

    def apply(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """``batch`` without the rows some delete file of the split deletes."""
        for keys in self.groups:
            if not batch.num_rows:
                return batch
            columns = []
            for name in keys.names:
                index = batch.schema.get_field_index(name)
                if index < 0:
                    raise DataError(f"Iceberg equality delete: column '{name}' is not in the batch read "
                                    f"(has {', '.join(batch.schema.names)})")
                columns.append(batch.column(index))
            mask = keys.matching_rows(columns)
            if pc.any(mask).as_py():
                batch = batch.filter(pc.invert(mask))
        return batch


def equality_deletes(metadata_location: str, refs: list, schema_json: str, properties: dict[str, str]) -> EqualityDeletes:
    """Executor side: the equality delete files ``refs`` names (``[manifest, spec id, entry,
    path]`` each), read with the equality columns of the read schema ``schema_json``."""
    key = tuple(sorted(properties.items()))
    grouped: dict[tuple[int, ...], list[tuple[list[str], pa.Table]]] = {}
    for manifest, spec_id, entry, path in refs:
        ids, names, table = _read_delete_file(metadata_location, manifest, spec_id, entry, path, schema_json, key)
        grouped.setdefault(ids, []).append((names, table))
    groups = []
    for parts in grouped.values():
        names = parts[0][0]
        tables = [table.rename_columns(names) for _, table in parts]
        first = tables[0].schema
        groups.append((names, pa.concat_tables([t if t.schema == first else t.cast(first) for t in tables])))
    return EqualityDeletes(groups)


@lru_cache(maxsize=16)
def _read_delete_file(metadata_location: str, manifest: str, spec_id: int, entry: int, path: str, schema_json: str,
                      properties: tuple) -> tuple[tuple[int, ...], list[str], pa.Table]:
    from pyiceberg.expressions import AlwaysTrue
    from pyiceberg.io import load_file_io
    from pyiceberg.io.pyarrow import ArrowScan
    from pyiceberg.manifest import DataFileContent
    from pyiceberg.schema import Schema
    from pyiceberg.table import FileScanTask

    from sparklink.iceberg.scan import data_file, table_metadata

    props = dict(properties)
    file = data_file(manifest, spec_id, entry, path, props)
    if file.content != DataFileContent.EQUALITY_DELETES or not file.equality_ids:
        raise DataError(f"Iceberg delete file {path}: not an equality delete file with equality ids")
    read_schema = Schema.model_validate_json(schema_json)
    ids = tuple(sorted(file.equality_ids))
    fields = []
    for field_id in ids:
        try:
            fields.append(read_schema.find_field(field_id))
        except ValueError:
            raise DataError(f"Iceberg equality delete file {path}: equality field id {field_id} is not a column of "
                            f"the schema read (a dropped column); the sparklink.iceberg source cannot apply it") from None
    scan = ArrowScan(table_metadata(metadata_location, props), load_file_io(props, path), Schema(*fields), AlwaysTrue())
    table = scan.to_table([FileScanTask(file)])
    names = [field.name for field in fields]
    if table.num_rows != file.record_count:
        raise DataError(f"Iceberg equality delete file {path}: read {table.num_rows} rows, its manifest says "
                        f"{file.record_count}")
    return ids, names, table.select(names)
