"""Tables written by pyiceberg itself (``table.append``) for the source's tests: never by
sparklink's code."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("label", pa.string())])


def rows(ids) -> pa.Table:
    ids = list(ids)
    return pa.table({"id": pa.array(ids, pa.int64()), "label": [f"l-{i}" for i in ids]}, schema=SCHEMA)


def catalog_of(options: dict):
    from pyiceberg.catalog import load_catalog

    properties = {k[len("catalog."):]: v for k, v in options.items() if k.startswith("catalog.") and k != "catalog.name"}
    return load_catalog(options.get("catalog.name", "default"), **properties)


def append_snapshots(options: dict, snapshots: int, rows_per_snapshot: int, *, first_id: int = 0,
                     partition_by: str | None = None) -> None:
    """Create the table when absent (partitioned by identity of ``partition_by`` if given), then
    ``snapshots`` pyiceberg appends of consecutive ids."""
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.transforms import IdentityTransform

    catalog = catalog_of(options)
    namespace, name = options["table"].rsplit(".", 1)
    catalog.create_namespace_if_not_exists(namespace)
    if not catalog.table_exists(options["table"]):
        schema = SCHEMA if partition_by is None else SCHEMA.append(pa.field(partition_by, pa.int32()))
        created = catalog.create_table(options["table"], schema=schema)
        if partition_by is not None:
            field_id = created.schema().find_field(partition_by).field_id
            spec = PartitionSpec(PartitionField(source_id=field_id, field_id=1000, transform=IdentityTransform(),
                                                name=partition_by))
            catalog.drop_table(options["table"])
            catalog.create_table(options["table"], schema=created.schema(), partition_spec=spec)
    table = catalog.load_table(options["table"])
    for number in range(snapshots):
        start = first_id + number * rows_per_snapshot
        data = rows(range(start, start + rows_per_snapshot))
        if partition_by is not None:
            data = data.append_column(partition_by, pa.array([i % 3 for i in data.column("id").to_pylist()], pa.int32()))
        table.append(data)


def commit_delete_file(table, deletes: pa.Table, *, equality_ids=None, spec_id=None, partition=None,
                       rows: pa.Table | None = None) -> None:
    """Commit one Parquet delete file as Iceberg's Java, Flink and Spark writers do in
    merge-on-read mode: position deletes (``file_path``, ``pos``) or, with ``equality_ids``, equality
    deletes (the table's columns of those field ids, field ids in the Parquet schema), written
    with partition spec ``spec_id`` (default: the table's) and ``partition`` values, and ``rows`` in a
    data file of the same snapshot (an upsert's insert, as Flink's writer commits). pyiceberg 0.12
    has no API to add a delete file: its fast append is given one more manifest, a delete manifest
    written with its own manifest writer (content ``deletes``)."""
    from pyiceberg.manifest import (
        DataFile,
        DataFileContent,
        FileFormat,
        ManifestContent,
        ManifestEntry,
        ManifestEntryStatus,
        ManifestWriterV2,
    )
    from pyiceberg.table.snapshots import Operation
    from pyiceberg.table.update.snapshot import _FastAppendFiles
    from pyiceberg.typedef import Record

    class DeleteManifestWriter(ManifestWriterV2):
        def content(self):
            return ManifestContent.DELETES

        def _with_partition(self, format_version):
            # pyiceberg 0.12 declares equality_ids (field 135) a list of longs; the spec and
            # Iceberg's Java reader say ints (a ClassCastException there otherwise)
            from pyiceberg.schema import Schema
            from pyiceberg.types import IntegerType, ListType, NestedField, StructType

            def fixed(field):
                if field.field_id == 135:
                    return NestedField(135, field.name, ListType(136, IntegerType(), element_required=True),
                                       required=False)
                return field

            schema = super()._with_partition(format_version)
            return Schema(*[NestedField(f.field_id, f.name, StructType(*[fixed(g) for g in f.field_type.fields]),
                                        required=f.required) if f.field_id == 2 else f for f in schema.fields],
                          schema_id=schema.schema_id)

        @property
        def _meta(self):
            return {**super()._meta, "content": "deletes"}

    spec_id = table.metadata.default_spec_id if spec_id is None else spec_id
    kind = "equality" if equality_ids else "position"
    uri = f"{table.location()}/data/{kind}-deletes-{len(table.snapshots())}.parquet"
    with table.io.new_output(uri).create(overwrite=True) as out:
        pq.write_table(deletes, out)
    delete_file = DataFile.from_args(
        content=DataFileContent.EQUALITY_DELETES if equality_ids else DataFileContent.POSITION_DELETES,
        file_path=uri, file_format=FileFormat.PARQUET, partition=partition or Record(), record_count=deletes.num_rows,
        file_size_in_bytes=len(table.io.new_input(uri)), spec_id=spec_id, equality_ids=equality_ids,
        key_metadata=None, sort_order_id=None)

    class WithDeletes(_FastAppendFiles):
        def _existing_manifests(self):
            metadata = self._transaction.table_metadata
            spec = next(s for s in metadata.partition_specs if s.spec_id == spec_id)
            writer = DeleteManifestWriter(spec, metadata.schema(), self.new_manifest_output(), self._snapshot_id,
                                          self._compression)
            with writer:
                writer.add(ManifestEntry.from_args(status=ManifestEntryStatus.ADDED, snapshot_id=self._snapshot_id,
                                                   sequence_number=None, file_sequence_number=None,
                                                   data_file=delete_file))
            return [*super()._existing_manifests(), writer.to_manifest_file()]

    with table.transaction() as transaction:
        with WithDeletes(operation=Operation.OVERWRITE, transaction=transaction, io=table.io, branch="main",
                         snapshot_properties={}) as producer:
            if rows is not None:
                from pyiceberg.io.pyarrow import _dataframe_to_data_files

                for data in _dataframe_to_data_files(transaction.table_metadata, rows, table.io):
                    producer.append_data_file(data)


def add_position_deletes(table, positions: dict[str, list[int]]) -> None:
    """Commit one Parquet position delete file (``positions``: data file path -> row positions)."""
    paths = sorted(positions)
    schema = pa.schema([pa.field("file_path", pa.string(), nullable=False,
                                 metadata={"PARQUET:field_id": "2147483546"}),
                        pa.field("pos", pa.int64(), nullable=False, metadata={"PARQUET:field_id": "2147483545"})])
    commit_delete_file(table, pa.table({"file_path": [p for p in paths for _ in positions[p]],
                                        "pos": [x for p in paths for x in sorted(positions[p])]}, schema=schema))


def add_equality_deletes(table, columns: dict[str, list], *, spec_id=None, partition=None, rows=None) -> None:
    """Commit one Parquet equality delete file on the columns ``columns`` names (name -> values,
    one delete row per index), typed and field-id'd as the table's schema says (``rows``: data
    committed in the same snapshot)."""
    from pyiceberg.io.pyarrow import schema_to_pyarrow
    from pyiceberg.schema import Schema

    fields = [table.schema().find_field(name) for name in columns]
    arrow = schema_to_pyarrow(Schema(*fields))  # with the field ids
    commit_delete_file(table, pa.table(columns, schema=arrow), equality_ids=[f.field_id for f in fields],
                       spec_id=spec_id, partition=partition, rows=rows)


def upserted_by_equality_deletes(options: dict) -> list[tuple[int, str]]:
    """Create the table of ``options`` with ids 0-9, then upsert ids 3 and 5 as Flink's writer
    commits an upsert (an equality delete on ``id``, naming 11 too, and the new rows in one
    snapshot); returns the sorted ``(id, label)`` rows a reader must see. pyiceberg 0.12's scan
    refuses equality deletes, so they are written out here by hand."""
    append_snapshots(options, 1, 10)
    new = rows([3, 5]).set_column(1, "label", pa.array(["new-3", "new-5"]))
    add_equality_deletes(catalog_of(options).load_table(options["table"]), {"id": [3, 5, 11]}, rows=new)
    return sorted([(i, f"l-{i}") for i in range(10) if i not in (3, 5)] + [(3, "new-3"), (5, "new-5")])
