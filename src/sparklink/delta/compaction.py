"""The Delta sink's compaction (driver side, in the worker that commits a micro-batch): after every
N-th micro-batch of a stream, the table's small files are rewritten into larger ones and committed
as one version of ``remove`` + ``add`` actions, all ``dataChange=false``.

sparklink plans, rewrites and commits the compaction itself instead of calling delta-rs's
``optimize.compact()``, because a compaction commit must never remove a file that another commit
removed after the compaction read the table: that commit's rows (an OPTIMIZE's rewrite, a
DELETE's surviving rows) would then be in the table twice, or deleted rows would come back.
delta-rs 1.6.6's conflict check lets such a commit through when the other commit's removes are
``dataChange=false`` (another compaction, delta-rs's OPTIMIZE): ``tests/delta/test_delta_compaction.py``
shows it. So, for one compaction:

1. **plan** (:func:`plan_bins`): from the latest snapshot, the files smaller than the target, per
   partition, packed into bins of up to the target size (a bin of one file is left alone); files
   with deletion vectors are left alone;
2. **rewrite** (:func:`rewrite_bin`): each bin's files read with pyarrow and written as one new file
   ``part-<tag>-c<batch>-...`` (the stream's tag, the micro-batch's id), that no version references;
3. **commit** (:func:`commit_compaction`): load the latest version ``L``; if any planned file is no
   longer in ``L``'s snapshot, the compaction is refused (its new files removed, logged, the
   next due micro-batch compacts again); otherwise commit at exactly version ``L + 1``
   (``max_commit_retries=0``: delta-rs neither rebases nor runs its conflict check; the commit
   file is created only if absent, on local disk as on S3). When another writer took ``L + 1``
   first, go back to the check on the newer state (up to :data:`MAX_COMMIT_ATTEMPTS` times,
   then the compaction is skipped).

Since the check and the commit are against the same version ``L``, no commit can come between
them unseen. The commit's ``commitInfo`` carries ``sparklink.compaction = <appId>:<batchId>``
(:mod:`sparklink.delta.committer` looks for it so that a micro-batch is compacted at most once).
Fault point ``delta.compaction.before_commit`` (after the rewrite, before the check); the files of
an attempt that crashed there are removed by the micro-batch's next compaction attempt
(:func:`remove_crashed_rewrites`).
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import CommitProperties, DeltaTable
from deltalake.exceptions import CommitFailedError
from deltalake.transaction import AddAction, RemoveAction

from sparklink.delta.files import OpenDataFile, partition_directory
from sparklink.delta.partition_values import partition_value_text
from sparklink.delta.table_location import TableLocation, add_actions, load_table
from sparklink.faults import fault_point
from sparklink.formats.config import FormatConfig
from sparklink.sink.writer import Committable

LOG = logging.getLogger(__name__)
MAX_COMMIT_ATTEMPTS = 10
COMPACTION_KEY = "sparklink.compaction"
BATCH_KEY = "sparklink.batch"  # a micro-batch's own commit: <appId>:<batchId>
_RECENT_COMMITS = 20


@dataclass(frozen=True, kw_only=True)
class PlannedFile:
    """A file the compaction rewrites: its path as the log spells it (URL-encoded), its size."""

    path: str
    size: int


@dataclass(frozen=True, kw_only=True)
class Bin:
    """Files of one partition rewritten into one file."""

    partition: dict[str, str | None]
    files: tuple[PlannedFile, ...]


def _deletion_vector_mask(adds: pa.Table) -> list[bool]:
    columns = [name for name in adds.column_names if name.lower().replace("_", "").startswith("deletionvector")]
    if not columns:
        return [False] * adds.num_rows
    present = [adds.column(name).is_valid().to_pylist() for name in columns]
    return [any(flags) for flags in zip(*present, strict=True)]


def plan_bins(table: DeltaTable, partition_columns: tuple[str, ...], target_size: int) -> list[Bin]:
    """The bins of the latest snapshot of ``table``: per partition, files smaller than
    ``target_size`` (smallest first) packed into bins of at most ``target_size`` bytes; only bins
    of two files or more."""
    adds = add_actions(table)
    with_vector = _deletion_vector_mask(adds)
    groups: dict[tuple, list[PlannedFile]] = {}
    values = {c: adds.column(f"partition.{c}").to_pylist() for c in partition_columns}
    for row, (path, size) in enumerate(zip(adds.column("path").to_pylist(), adds.column("size_bytes").to_pylist(),
                                           strict=True)):
        if size >= target_size or with_vector[row]:
            continue
        key = tuple(partition_value_text(values[c][row], c) for c in partition_columns)
        groups.setdefault(key, []).append(PlannedFile(path=path, size=size))
    bins = []
    for key, files in sorted(groups.items(), key=lambda item: [(v is None, v or "") for v in item[0]]):
        current: list[PlannedFile] = []
        for planned in sorted(files, key=lambda f: (f.size, f.path)):
            if current and sum(f.size for f in current) + planned.size > target_size:
                if len(current) > 1:
                    bins.append(Bin(partition=dict(zip(partition_columns, key, strict=True)), files=tuple(current)))
                current = []
            current.append(planned)
        if len(current) > 1:
            bins.append(Bin(partition=dict(zip(partition_columns, key, strict=True)), files=tuple(current)))
    return bins


def _conform(data: pa.Table, schema: pa.Schema) -> pa.Table:
    """``data`` with ``schema``'s columns in its order (columns a later schema change added are
    null in older files) and types."""
    columns = []
    for field in schema:
        if field.name in data.column_names:
            columns.append(data.column(field.name).cast(field.type))
        else:
            columns.append(pa.nulls(data.num_rows, field.type))
    return pa.Table.from_arrays(columns, schema=schema)


def rewrite_bin(location: TableLocation, bin_: Bin, data_schema: pa.Schema, partition_columns: tuple[str, ...],
                tag: str, batch_id: int, parquet: FormatConfig) -> Committable:
    """Read the bin's files (one at a time) and write their rows into one new data file."""
    directory = partition_directory(partition_columns, tuple(bin_.partition[c] for c in partition_columns))
    name = f"{directory}part-{tag}-c{batch_id:08d}-{uuid.uuid4().hex[:12]}.{parquet.codec}{parquet.extension}"
    handle = OpenDataFile(location, name, data_schema, parquet, dict(bin_.partition))
    try:
        for planned in bin_.files:
            handle.write(_conform(pq.read_table(location.open_input(unquote(planned.path))), data_schema))
        return handle.close()
    except BaseException:
        handle.writer.close()
        handle.file.discard()
        raise


def _active_paths(table: DeltaTable) -> set[str]:
    return set(add_actions(table).column("path").to_pylist())


def commit_compaction(location: TableLocation, bins: list[Bin], written: list[Committable], *, marker: str,
                      partition_columns: tuple[str, ...], batch_id: int) -> bool:
    """Commit the rewrite (``written[i]`` is bin ``i``'s new file) at exactly the version after
    the one the check ran on; True when committed (or found committed), False when refused
    because a planned file was removed meanwhile, or skipped after :data:`MAX_COMMIT_ATTEMPTS`
    lost races. A refused or skipped rewrite's new files are removed (no version references them)."""
    planned = [f for bin_ in bins for f in bin_.files]
    now = int(time.time() * 1000)
    actions: list[AddAction | RemoveAction] = [
        RemoveAction(path=f.path, data_change=False, deletion_timestamp=now, size=f.size,
                     partition_values=dict(bin_.partition)) for bin_ in bins for f in bin_.files]
    actions += [AddAction(path=c["path"], size=int(c["size"]), partition_values=c["partitionValues"],
                          modification_time=int(c["modificationTime"]), data_change=False, stats=c["stats"])
                for c in written]
    fault_point("delta.compaction.before_commit", batch_id=batch_id)
    for attempt in range(MAX_COMMIT_ATTEMPTS):
        table = load_table(location)
        if table is None:
            raise FileNotFoundError(f"the Delta table {location.uri()} vanished during its compaction")
        if attempt and compaction_done(table, marker):  # an earlier attempt's commit did land
            return True
        active = _active_paths(table)
        gone = [f.path for f in planned if f.path not in active]
        if gone:
            LOG.warning("compaction after micro-batch %s of %s refused: %d of the %d files it rewrote were removed "
                        "by another commit since it read the table (e.g. %s, gone at version %s); committing it "
                        "would add their rows again. The micro-batch's data is committed; the next due "
                        "micro-batch compacts again", batch_id, location.uri(), len(gone), len(planned), gone[0],
                        table.version())
            _discard(location, written)
            return False
        try:
            table.create_write_transaction(
                actions, mode="append", schema=table.schema(), partition_by=list(partition_columns) or None,
                commit_properties=CommitProperties(custom_metadata={COMPACTION_KEY: marker}, max_commit_retries=0))
        except CommitFailedError as exc:  # another writer committed version L + 1 first
            LOG.info("compaction after micro-batch %s of %s: version %s was taken by another writer (%s); checking "
                     "again", batch_id, location.uri(), table.version() + 1, exc)
            continue
        return True
    LOG.warning("compaction after micro-batch %s of %s skipped: other writers took every version it tried "
                "(%d attempts); the micro-batch's data is committed", batch_id, location.uri(), MAX_COMMIT_ATTEMPTS)
    _discard(location, written)
    return False


def _discard(location: TableLocation, written: list[Committable]) -> None:
    for committable in written:
        location.delete(committable["path"])


def remove_crashed_rewrites(location: TableLocation, tag: str, batch_id: int, kept: set[str]) -> None:
    """After the compaction of micro-batch ``batch_id`` (committed or refused): files of an earlier
    attempt of that compaction that crashed before its commit (``part-<tag>-c<batch>-...`` in the
    directories this attempt wrote to, not ``kept``) are removed. No version references them: had
    the earlier attempt committed, its marker would have stopped this one before it planned."""
    prefix = f"part-{tag}-c{batch_id:08d}-"
    for directory in {path.rpartition("/")[0] for path in kept}:
        for relative in location.names_in(directory, prefix):
            if relative not in kept:
                LOG.info("removing %s, a crashed compaction attempt's file (micro-batch %s)", relative, batch_id)
                location.delete(relative)


def compaction_done(table: DeltaTable, marker: str) -> bool:
    """Whether a compaction commit marked ``marker`` follows the micro-batch commit marked the
    same: the commit infos newest first, down to that micro-batch's commit (the last 20, then
    the whole history if the micro-batch's commit is older)."""
    for limit in (_RECENT_COMMITS, None):
        for info in table.history(limit):
            if info.get(COMPACTION_KEY) == marker:
                return True
            if info.get(BATCH_KEY) == marker:
                return False
        if limit is not None and table.version() + 1 <= limit:
            break
    return False


