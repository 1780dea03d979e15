"""``writeMode=upsert`` into a Delta table (driver side, inside the committer): a micro-batch's
staged changes reduced to one change per key and applied by ONE delta-rs MERGE, whose commit
carries the batch's ``txn(appId, batchId)``.

* The tasks (executors) wrote the batch's rows, every column and in the batch's order, into
  staged Parquet files under ``_sparklink/staged-changes/`` (no table version ever references
  them; they are removed once the batch is committed, or by the job's abort).
* The committer reads them in order (task partition id, then file number), reduces them with
  :meth:`sparklink.sink.changelog.Changelog.reduce` (the last change per key; ties of the
  sequence column refused) and runs one ``DeltaTable.merge`` on the keys:
  ``when_matched_delete`` for deletes, ``when_matched_update`` for the other changes and
  ``when_not_matched_insert`` for new keys; with ``sequenceColumn`` both matched clauses hold
  only where the change's sequence value is at least the stored row's (or the stored one is
  null), so an older change never takes a row back. delta-rs commits ``add`` / ``remove``
  (and ``cdc`` with the change data feed on) with the ``txn`` action in one version.

delta-rs does not refuse a second MERGE carrying a ``txn`` version already in the table (tested in
tests/delta/test_delta_upsert.py): the committer's check of ``transaction_version`` before it
merges is what makes a replay a no-op.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import CommitProperties, DeltaTable

from sparklink.delta.invariants import check_not_null
from sparklink.delta.table_location import TableLocation
from sparklink.formats import parquet
from sparklink.sink.changelog import Changelog, ChangeSet
from sparklink.sink.writer import Committable

LOG = logging.getLogger(__name__)
DELETE_FLAG = "__sparklink_delete"


def quote(name: str) -> str:
    """A column name in delta-rs's SQL (DataFusion's dialect: double quotes)."""
    return '"' + name.replace('"', '""') + '"'


def read_staged(location: TableLocation, committables: Iterable[Committable]) -> pa.Table | None:
    """The batch's changes in its order (the staged files by task partition id, then file
    number); None when no task staged a file."""
    ordered = sorted(committables, key=lambda c: tuple(c.get("order", (0, 0))))
    tables = [parquet.read_table(location.open_input(c["path"]), c["path"]) for c in ordered]
    if not tables:
        return None
    return pa.concat_tables(tables, promote_options="default")


def merge_source(changes: ChangeSet, table_schema: pa.Schema) -> pa.Table:
    """The reduced batch as the MERGE's source: the table's columns (cast to the table's types:
    zoned timestamps to UTC) and the delete flag."""
    rows = changes.rows
    columns = [rows.column(f.name).cast(f.type) if f.name in rows.column_names else pa.nulls(rows.num_rows, f.type)
               for f in table_schema]
    fields = [pa.field(f.name, f.type, nullable=True) for f in table_schema]
    return pa.Table.from_arrays([*columns, changes.deletes],
                                schema=pa.schema([*fields, pa.field(DELETE_FLAG, pa.bool_(), nullable=False)]))


def merge_changes(table: DeltaTable, changelog: Changelog, changes: pa.Table, table_schema: pa.Schema, root: str,
                  not_null: tuple[str, ...], commit_properties: CommitProperties) -> dict:
    """Reduce ``changes`` and apply them to ``table`` in one MERGE commit (with
    ``commit_properties``: the batch's txn and commitInfo); returns delta-rs's metrics. A null
    in a NOT NULL column of an upsert fails it before anything is committed."""
    reduced = changelog.reduce(changes)
    if not_null:
        check_not_null(reduced.upserts(), not_null, root)
    source = merge_source(reduced, table_schema)
    on = " AND ".join(f"t.{quote(k)} = s.{quote(k)}" for k in changelog.key_columns)
    updates = {quote(f.name): f"s.{quote(f.name)}" for f in table_schema}
    newer = "TRUE"
    if changelog.sequence_column is not None:
        seq = quote(changelog.sequence_column)
        newer = f"(t.{seq} IS NULL OR s.{seq} >= t.{seq})"
    flag = quote(DELETE_FLAG)
    metrics = (table.merge(source=source, predicate=on, source_alias="s", target_alias="t",
                           commit_properties=commit_properties, streamed_exec=False)
               .when_matched_delete(predicate=f"s.{flag} AND {newer}")
               .when_matched_update(updates=updates, predicate=f"NOT s.{flag} AND {newer}")
               .when_not_matched_insert(updates=updates, predicate=f"NOT s.{flag}")
               .execute())
    LOG.info("merged %d changes (%d deletes) into %s: %s", reduced.num_rows,
             pc.sum(pc.cast(reduced.deletes, pa.int64())).as_py() or 0, root, metrics)
    return metrics
