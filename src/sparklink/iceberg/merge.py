"""``writeMode=upsert`` into Iceberg: a copy-on-write merge in Arrow, one snapshot per batch
(driver side, in the commit).

pyiceberg 0.12's ``Transaction.upsert`` is not used: it raises on a key that appears twice in
its input, has no "only if newer" condition, and is slow (it joins the whole input against a
scan of every file the keys' filter matches, in Python expressions). Here, for one batch:

1. **reduce** the batch's changes to one per key (:meth:`Changelog.reduce`: the last by the
   ``sequenceColumn``, else by the batch's order);
2. **plan** the data files the keys can touch: pyiceberg's scan planning with a filter on the key
   columns (an ``IN`` list for up to :data:`IN_LIMIT` keys of one column, else each key column's
   range), which prunes by partition values and column statistics (min/max) in the manifests;
3. **read** those files (pyiceberg's ``ArrowScan``, delete files applied, projected onto the
   current schema), find the stored rows of the batch's keys; a change older than the stored row
   (``sequenceColumn``) is dropped (:func:`newer_than_stored`);
4. **rewrite** every file that holds a key the remaining changes touch: its other rows go into
   new files; the remaining upserts are appended (pyiceberg's writer: field ids, the table's
   partition spec, statistics);
5. **commit** one snapshot: ``overwrite`` (the touched files deleted, the new ones added) or a
   plain ``append`` when no stored row was touched, with the batch's identity in its summary.

The commit is a compare-and-swap on the branch's head (pyiceberg's ``AssertRefSnapshotId``).
pyiceberg's own retry (which re-applies the same file lists on refreshed metadata) is switched
off for this transaction: after another writer's commit the plan may be stale (that writer may
have added a row with one of the batch's keys), so a lost swap removes the files just written
and the whole merge runs again on the refreshed table (:func:`merge_with_retries`), looking for
the batch's identity first. Never a duplicate key, never a lost row.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from sparklink.arrow_arrays import repeated, row_numbers
from sparklink.errors import CommitError, ConfigError
from sparklink.sink.changelog import Changelog, ChangeSet, newer_than_stored

LOG = logging.getLogger(__name__)
IN_LIMIT = 200  # pyiceberg's metrics evaluator gives up on IN lists longer than this
_ROW = "__sparklink_row"
_HIT = "__sparklink_hit"


@dataclass
class MergeStats:
    """What one merge did (for logs and the bench)."""

    changes: int = 0
    skipped_older: int = 0
    files_scanned: int = 0
    files_rewritten: int = 0
    rows_rewritten: int = 0
    files_added: int = 0
    seconds: dict[str, float] = field(default_factory=dict)


def _key_filter(changelog: Changelog, keys: pa.Table):
    """A pyiceberg expression every stored row with one of ``keys`` satisfies."""
    from pyiceberg.expressions import And, GreaterThanOrEqual, In, LessThanOrEqual, Reference

    columns = changelog.key_columns
    if len(columns) == 1:
        values = pc.unique(keys.column(columns[0]))
        if len(values) <= IN_LIMIT:
            return In(term=Reference(columns[0]), values=values.to_pylist())
    parts = []
    for column in columns:
        bounds = pc.min_max(keys.column(column))
        low, high = bounds["min"].as_py(), bounds["max"].as_py()
        if low is None or isinstance(low, bool | bytes):  # no useful order: every file may match
            continue
        parts.extend([GreaterThanOrEqual(term=Reference(column), value=low),
                      LessThanOrEqual(term=Reference(column), value=high)])
    if not parts:
        from pyiceberg.expressions import AlwaysTrue

        return AlwaysTrue()
    return parts[0] if len(parts) == 1 else And(*parts)


def key_mask(rows: pa.Table, keys: pa.Table, columns: tuple[str, ...]) -> pa.Array:
    """True for each row of ``rows`` whose key (``columns``) is one of ``keys``'s."""
    if rows.num_rows == 0 or keys.num_rows == 0:
        return repeated(False, pa.bool_(), rows.num_rows)
    if len(columns) == 1:
        value_set = keys.column(columns[0]).combine_chunks()
        column = rows.column(columns[0])
        if not column.type.equals(value_set.type):
            value_set = value_set.cast(column.type)
        return pc.fill_null(pc.is_in(column, value_set=value_set), False).combine_chunks()
    left = rows.select(list(columns)).append_column(_ROW, row_numbers(rows.num_rows))
    right = keys.select(list(columns)).group_by(list(columns)).aggregate([])
    right = right.append_column(_HIT, repeated(True, pa.bool_(), right.num_rows))
    right = right.cast(pa.schema([*(left.schema.field(c) for c in columns), right.schema.field(_HIT)]))
    joined = left.join(right, keys=list(columns), join_type="left outer").sort_by([(_ROW, "ascending")])
    return pc.fill_null(joined.column(_HIT), False).combine_chunks()


def _latest_stored(changelog: Changelog, stored: pa.Table) -> pa.Table:
    """One stored row per key (the greatest sequence value), key and sequence columns only."""
    seq = changelog.sequence_column
    assert seq is not None
    grouped = stored.group_by(list(changelog.key_columns)).aggregate([(seq, "max")])
    return grouped.rename_columns([*(c if c != f"{seq}_max" else seq for c in grouped.column_names)])


@dataclass
class MergePlan:
    """The outcome of :func:`plan_merge`: files to delete and add (already written)."""

    deleted: list = field(default_factory=list)  # DataFile
    added: list = field(default_factory=list)  # DataFile
    stats: MergeStats = field(default_factory=MergeStats)


def plan_merge(table, change_set: ChangeSet, branch: str, write_uuid: uuid.UUID) -> MergePlan:
    """Steps 2-4 above on ``table`` as loaded (the head of ``branch``); the new files are
    written (their names carry ``write_uuid``), nothing is committed."""
    import time

    from pyiceberg.io.pyarrow import ArrowScan, _dataframe_to_data_files

    changelog = change_set.changelog
    plan = MergePlan()
    stats = plan.stats
    stats.changes = change_set.num_rows
    started = time.monotonic()
    metadata = table.metadata
    schema = metadata.schema()
    target = schema.as_arrow()
    snapshot = metadata.snapshot_by_name(branch)
    keys = change_set.rows.select(list(changelog.key_columns))
    touched: list[tuple[Any, pa.Table, pa.Array]] = []
    if snapshot is not None:
        scan = table.scan(row_filter=_key_filter(changelog, keys), snapshot_id=snapshot.snapshot_id)
        tasks = list(scan.plan_files())
        stats.files_scanned = len(tasks)
        reader = ArrowScan(metadata, table.io, schema, _always_true())
        for task in tasks:
            rows = reader.to_table([task])
            mask = key_mask(rows, keys, changelog.key_columns)
            if pc.any(mask).as_py():
                touched.append((task, rows, mask))
    stats.seconds["scan"] = time.monotonic() - started
    started = time.monotonic()
    changes = change_set.rows
    deletes = change_set.deletes
    if changelog.sequence_column is not None and touched:
        stored = pa.concat_tables([rows.filter(mask).select([*changelog.key_columns, changelog.sequence_column])
                                   for _task, rows, mask in touched])
        applies = newer_than_stored(changelog, changes, _latest_stored(changelog, stored))
        stats.skipped_older = changes.num_rows - pc.sum(applies.cast(pa.int64())).as_py()
        changes, deletes = changes.filter(applies), pc.filter(deletes, applies)
    applied = ChangeSet(changelog=changelog, rows=changes, deletes=deletes)
    applied_keys = changes.select(list(changelog.key_columns))
    kept: list[pa.Table] = []
    for task, rows, _mask in touched:
        gone = key_mask(rows, applied_keys, changelog.key_columns)
        if not pc.any(gone).as_py():
            continue  # only older changes touched it: the file stays
        plan.deleted.append(task.file)
        left = rows.filter(pc.invert(gone))
        stats.rows_rewritten += left.num_rows
        if left.num_rows:
            kept.append(left.cast(target))
    upserts = applied.upserts()
    new_rows = [*kept, conform(upserts, target)] if upserts.num_rows else kept
    stats.seconds["merge"] = time.monotonic() - started
    started = time.monotonic()
    if new_rows:
        frame = pa.concat_tables(new_rows)
        plan.added = list(_dataframe_to_data_files(table_metadata=metadata, df=frame, io=table.io,
                                                   write_uuid=write_uuid))
    stats.files_rewritten = len(plan.deleted)
    stats.files_added = len(plan.added)
    stats.seconds["write"] = time.monotonic() - started
    return plan


def _always_true():
    from pyiceberg.expressions import AlwaysTrue

    return AlwaysTrue()


def conform(rows: pa.Table, target: pa.Schema) -> pa.Table:
    """``rows`` (the stored columns of the input) as the table's Arrow schema: columns by name, a
    column the input lacks is null; a type that does not cast is refused naming the column."""
    columns = []
    for field_ in target:
        if field_.name in rows.column_names:
            column = rows.column(field_.name)
            try:
                columns.append(column.cast(field_.type) if not column.type.equals(field_.type) else column)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                raise ConfigError("table", f"column '{field_.name}' of the input ({column.type}) does not fit the "
                                  f"table's type {field_.type}: {exc}") from None
        else:
            columns.append(pa.nulls(rows.num_rows, field_.type))
    extra = [name for name in rows.column_names if name not in target.names]
    if extra:
        raise ConfigError("table", f"column(s) {extra} of the input are not columns of the table "
                          f"(its columns: {', '.join(target.names)})", "add them to the table first")
    return pa.Table.from_arrays(columns, schema=target)


def commit_plan(table, plan: MergePlan, summary: dict[str, str], branch: str) -> None:
    """Step 5: one snapshot on ``branch`` (overwrite, or append when nothing is deleted) whose
    summary holds ``summary``; a lost compare-and-swap raises ``CommitFailedException`` at once
    (pyiceberg's retry of the same file lists is switched off, see the module's docstring)."""
    from pyiceberg.table import TableProperties

    transaction = table.transaction()
    if transaction.table_metadata.name_mapping() is None:
        transaction.set_properties(**{TableProperties.DEFAULT_NAME_MAPPING:
                                      transaction.table_metadata.schema().name_mapping.model_dump_json()})
    update = transaction.update_snapshot(snapshot_properties=summary, branch=branch)
    producer = update.overwrite() if plan.deleted else update.fast_append()
    with producer:
        for data_file in plan.deleted:
            producer.delete_data_file(data_file)
        for data_file in plan.added:
            producer.append_data_file(data_file)
    transaction._snapshot_producers = []  # no re-application of a stale plan (pinned pyiceberg 0.12)
    transaction.commit_transaction()


def remove_files(io, data_files: list) -> None:
    """Remove data files that were written for a commit that did not land."""
    for data_file in data_files:
        try:
            io.delete(data_file.file_path)
        except FileNotFoundError:
            pass


def merge_with_retries(load_table: Callable[[], object], change_set: ChangeSet, *, summary: dict[str, str],
                       branch: str, already_committed: Callable[[object], bool], owner_tag: str,
                       attempts: int = 8, before_commit: Callable[[], None] | None = None) -> MergeStats | None:
    """Plan, write and commit one batch's merge; after a lost compare-and-swap, remove the new
    files and run again on the refreshed table (up to ``attempts`` times), first asking
    ``already_committed(table)`` (then None is returned: nothing to do). ``before_commit`` runs
    between the plan and the commit (a fault point, or a test's concurrent writer)."""
    from pyiceberg.exceptions import CommitFailedException

    for attempt in range(attempts):
        table = load_table()
        if already_committed(table):
            return None
        plan = plan_merge(table, change_set, branch, owner_uuid(owner_tag))
        try:
            if before_commit is not None:
                before_commit()
            commit_plan(table, plan, summary, branch)
        except CommitFailedException as exc:
            remove_files(table.io, plan.added)  # type: ignore[attr-defined]
            LOG.warning("merge into %s lost its compare-and-swap to another writer (attempt %s of %s: %s); "
                        "merging again on the refreshed table", table, attempt + 1, attempts, exc)
            continue
        except BaseException:
            remove_files(table.io, plan.added)  # type: ignore[attr-defined]
            raise
        LOG.info("merged %s change(s): %s file(s) rewritten (%s rows kept), %s added, %s older change(s) skipped",
                 plan.stats.changes, plan.stats.files_rewritten, plan.stats.rows_rewritten, plan.stats.files_added,
                 plan.stats.skipped_older)
        return plan.stats
    raise CommitError(f"the merge lost its compare-and-swap {attempts} times in a row to other writers")


def owner_uuid(owner_tag: str) -> uuid.UUID:
    """A fresh UUID whose first hex digits are ``owner_tag`` (hex), so the files pyiceberg names
    after it (``00000-<task>-<uuid>.parquet``) tell which writer made them (the orphan sweep)."""
    fresh = uuid.uuid4().hex
    return uuid.UUID(hex=(owner_tag + fresh)[:32])
