"""Tables written by pyiceberg itself (``table.append``) for the source's tests: never by
sparklink's code."""

from __future__ import annotations

import pyarrow as pa

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
