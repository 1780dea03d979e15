"""The commit of a ``writeMode=upsert`` batch into Iceberg (driver side).

The executors stage the batch's changes as Parquet files (every input column, the ``opColumn``
included, unpartitioned) under the table's ``data/`` folder; no snapshot ever references them.
The commit reads them in the batch's order (Spark's partitions, then rows), reduces them to one
change per key and merges them (:mod:`sparklink.iceberg.merge`) in one snapshot carrying the
batch's identity; then the staged files are removed (a crash before that leaves them to the
orphan sweep, :mod:`sparklink.iceberg.sweep`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import pyarrow as pa
import pyarrow.parquet as pq

from sparklink.sink.changelog import Changelog
from sparklink.sink.writer import Committable

LOG = logging.getLogger(__name__)
CHANGES = "changes"  # committable key: true for a staged changes file


def read_changes(io, committables: list[Committable]) -> pa.Table | None:
    """The staged changes of one batch, in the batch's order (task, then file); None if empty."""
    ordered = sorted(committables, key=lambda c: (c.get("task", 0), c.get("index", 0), c["file"]))
    tables = []
    for committable in ordered:
        with io.new_input(committable["file"]).open(seekable=True) as stream:
            tables.append(pq.read_table(stream))
    tables = [t for t in tables if t.num_rows]
    if not tables:
        return None
    return pa.concat_tables(tables, promote_options="permissive")


def remove_staged(io, committables: list[Committable]) -> None:
    for committable in committables:
        try:
            io.delete(committable["file"])
        except FileNotFoundError:
            pass


def commit_changes(load_table: Callable[[], object], changelog: Changelog, committables: list[Committable], *,
                   summary: dict[str, str], branch: str, already_committed: Callable[[object], bool],
                   owner_tag: str, before_commit: Callable[[], None] | None = None):
    """Merge the staged changes of one batch (see the module's docstring); the merge's stats,
    or None when there was nothing to commit (no change, or the batch already committed)."""
    from sparklink.iceberg.merge import merge_with_retries

    table = load_table()
    if already_committed(table):
        return None
    changes = read_changes(table.io, committables)  # type: ignore[attr-defined]
    if changes is None:
        return None
    change_set = changelog.reduce(changes)
    return merge_with_retries(load_table, change_set, summary=summary, branch=branch,
                              already_committed=already_committed, owner_tag=owner_tag, before_commit=before_commit)
