"""The Delta sink's committer (driver side): one Delta transaction per micro-batch or job.

For micro-batch ``n`` of a stream with application id ``A`` (or a ``df.write`` with
``txnAppId`` / ``txnVersion``):

1. load the table's latest snapshot (create the table from the input's schema when absent:
   version 0 holds only its schema and protocol);
2. read ``transaction_version(A)``; at or past ``n`` the batch is already in the table (a
   replay, or a roll-forward after a crash between the Delta commit and the commit log): every
   request is signalled already committed and nothing is written;
3. otherwise commit every data file as an ``add`` action together with ``txn(A, n)`` in one
   transaction (``userMetadata`` in its commitInfo); delta-rs commits it optimistically on top
   of the snapshot read in 1, retrying over concurrent appends of other writers.

Steps 2 and 3 run for one application id in one process at a time: a stream's id belongs to its
checkpoint, which Spark runs once, and the SDK commits a checkpoint's micro-batches one after the
other. Named fault points: ``delta.after_create``, ``delta.after_schema_change``, ``delta.before_commit``,
``delta.after_commit``, ``delta.before_compaction``, ``delta.after_compaction``.

   With ``writeMode=upsert`` step 3 is ONE delta-rs MERGE of the batch's staged changes with the
   txn in its commit (:mod:`sparklink.delta.merge`); ``mode("overwrite")`` commits the files with
   every old file removed, and ``replaceWhere`` is delta-rs's predicate overwrite of the staged rows.

4. with ``compaction.everyNCheckpoints``: after every N-th micro-batch, one compaction commit
   (:meth:`DeltaCommitter._compact`).
"""

from __future__ import annotations

import logging

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from deltalake import Schema as DeltaSchema
from deltalake.exceptions import DeltaError
from deltalake.transaction import AddAction, RemoveAction

from sparklink.delta.compaction import (
    BATCH_KEY,
    commit_compaction,
    compaction_done,
    plan_bins,
    remove_crashed_rewrites,
    rewrite_bin,
)
from sparklink.delta.config import CompactionConfig
from sparklink.delta.files import file_tag
from sparklink.delta.invariants import table_invariants
from sparklink.delta.merge import merge_changes, read_staged
from sparklink.delta.table_location import TableLocation, load_table
from sparklink.errors import CommitError, ConfigError
from sparklink.faults import fault_point
from sparklink.formats.config import FormatConfig
from sparklink.sink.changelog import Changelog
from sparklink.sink.committer import CommitRequest, Committer

LOG = logging.getLogger(__name__)


def schema_change(table_schema: pa.Schema, input_schema: pa.Schema) -> tuple[list[str], list[str]]:
    """(columns the input adds, columns whose type differs or the input lacks)."""
    table_fields = {f.name: f for f in table_schema}
    added = [f.name for f in input_schema if f.name not in table_fields]
    changed = [f"{f.name}: table {table_fields[f.name].type}, input {f.type}" for f in input_schema
               if f.name in table_fields and not table_fields[f.name].type.equals(f.type)]
    missing = [f"{name} (not in the input)" for name in table_fields if name not in input_schema.names]
    return added, changed + missing


class DeltaCommitter(Committer):
    """Commits the data files of one micro-batch (``batch_id``) or job as one Delta version."""

    def __init__(self, *, table: TableLocation, schema: pa.Schema, partition_columns: tuple[str, ...],
                 stream_app_id: str | None, txn_app_id: str | None, txn_version: int | None, merge_schema: bool,
                 user_metadata: str | None, compaction: CompactionConfig | None = None,
                 partition_columns_given: bool = True, changelog: Changelog | None = None, overwrite: bool = False,
                 replace_where: str | None = None):
        self.table = table
        self.root = table.uri()
        self.schema = schema
        self.partition_columns = partition_columns
        self.stream_app_id = stream_app_id
        self.txn_app_id = txn_app_id
        self.txn_version = txn_version
        self.merge_schema = merge_schema
        self.user_metadata = user_metadata
        self.compaction = compaction
        self.partition_columns_given = partition_columns_given
        self.changelog = changelog  # writeMode=upsert: one MERGE of the staged changes (sparklink.delta.merge)
        self.overwrite = overwrite  # df.write mode("overwrite"), with replace_where: only the matching rows
        self.replace_where = replace_where
        self.parquet = FormatConfig(name="parquet")

    def _table(self, batch_id: int | None) -> DeltaTable:
        table = load_table(self.table)
        if table is not None:
            return table
        LOG.info("creating Delta table %s from the input's schema", self.root)
        try:
            DeltaTable.create(self.root, self.schema, mode="error", partition_by=list(self.partition_columns) or None,
                              storage_options=self.table.delta_storage_options())
        except DeltaError as exc:  # another writer may have created it meanwhile: then use theirs
            table = load_table(self.table)
            if table is None:
                raise
            LOG.info("table %s was created by another writer meanwhile (%s)", self.root, exc)
            return table
        fault_point("delta.after_create", batch_id=batch_id)
        return self._reload()

    def _reload(self) -> DeltaTable:
        table = load_table(self.table)
        if table is None:
            raise CommitError(f"the Delta table {self.root} vanished during the commit")
        return table

    def _check_layout(self, table: DeltaTable, checked_not_null: set[str] | None) -> pa.Schema:
        """The schema to commit with: the table's, or the merged one under ``mergeSchema``. The
        table's invariants are those the tasks enforced (``checked_not_null``: the NOT NULL
        columns every task checked, None for files written before the tasks recorded them), else
        nothing is committed."""
        invariants = table_invariants(table, self.root)
        unchecked = [c for c in invariants.not_null if checked_not_null is not None and c not in checked_not_null]
        if unchecked:
            raise CommitError(f"the Delta table {self.root} has NOT NULL columns the write's tasks did not check "
                              f"({', '.join(unchecked)}: the table changed while they ran); nothing was committed")
        metadata = table.metadata()
        if tuple(metadata.partition_columns) != self.partition_columns:
            raise ConfigError("partitionColumns", f"the table {self.root} is partitioned by "
                              f"{list(metadata.partition_columns) or 'nothing'}, the sink by "
                              f"{list(self.partition_columns) or 'nothing'}", "the table's partition columns")
        table_schema = pa.schema(table.schema().to_arrow())
        added, changed = schema_change(table_schema, self.schema)
        if changed:
            raise ConfigError("mergeSchema", f"the input does not fit the table {self.root}: {'; '.join(changed)}",
                              "an input whose columns have the table's types (mergeSchema only adds columns)")
        if not added:
            return table_schema
        if not self.merge_schema:
            raise ConfigError("mergeSchema", f"the input has columns the table {self.root} lacks: {', '.join(added)}",
                              "mergeSchema=true to add them to the table")
        # a version of its own before the data's (delta-rs commits a schema change only as one);
        # after a crash in between, the replay finds the columns there and commits the data
        LOG.info("mergeSchema: adding columns %s to %s", added, self.root)
        table.alter.add_columns(DeltaSchema.from_arrow(pa.schema([self.schema.field(n) for n in added])).fields)
        fault_point("delta.after_schema_change")
        return pa.schema(self._reload().schema().to_arrow())

    def commit(self, requests: list[CommitRequest]) -> None:
        if not requests:
            return
        batch_id = requests[0].batch_id
        if not self.partition_columns_given:  # the tasks took the table's partition columns (none for a new table)
            first = requests[0].committable
            columns = first["tablePartitionColumns"] if "tablePartitionColumns" in first else first["partitionValues"]
            self.partition_columns = tuple(columns)
        app_id: str | None
        version: int | None
        if batch_id is not None:
            if self.stream_app_id is None:
                raise ConfigError("checkpointLocation", "is required as an option of a stream into sparklink.delta "
                                  "(its Delta application id is kept there)")
            app_id, version = self.stream_app_id, batch_id
        else:  # a df.write: no run restores before it (a stream's restore probes once per run)
            app_id, version = self.txn_app_id, self.txn_version
            self.table.check_conditional_writes()
        table = self._table(batch_id)
        if app_id is not None:
            # a stream's version is its batch id; txnAppId comes only with txnVersion (DeltaConfig.from_options)
            assert version is not None
            committed = table.transaction_version(app_id)
            if committed is not None and committed >= version:
                LOG.info("Delta table %s already holds txn(%s, %s) (batch %s): nothing to commit",
                         self.root, app_id, committed, version)
                # a roll-forward after a crash between the data's commit and the compaction's
                self._compact(batch_id)
                for request in requests:
                    request.signal_already_committed()
                self._remove_staged(requests)
                return
        checked: set[str] | None = None
        for request in requests:
            recorded = request.committable.get("notNull")
            if recorded is not None:
                checked = set(recorded) if checked is None else checked & set(recorded)
        if self.changelog is not None or (self.overwrite and self.replace_where is not None):
            # staged rows: NOT NULL is checked here on the reduced upserts, by delta-rs's write for replaceWhere
            checked = None
        schema = self._check_layout(table, checked)
        table = self._reload() if schema != pa.schema(table.schema().to_arrow()) else table
        metadata = {"userMetadata": self.user_metadata} if self.user_metadata is not None else {}
        if batch_id is not None:
            metadata[BATCH_KEY] = f"{app_id}:{version}"
        transactions = ([Transaction(app_id=app_id, version=version)]
                        if app_id is not None and version is not None else None)  # both or neither (above)
        properties = CommitProperties(custom_metadata=metadata or None, app_transactions=transactions)
        if self.overwrite and self.replace_where is not None:
            self._replace_where(table, schema, requests, properties)
            LOG.info("replaced the rows of %s where %s (version %s, txn %s, %s)", self.root, self.replace_where,
                     self._reload().version(), app_id, version)
            self._remove_staged(requests)
            return
        if self.changelog is not None:
            self._merge(table, schema, requests, properties, batch_id)
            LOG.info("merged micro-batch/job into %s as version %s (txn %s, %s)", self.root, self._reload().version(),
                     app_id, version)
            fault_point("delta.after_commit", batch_id=batch_id)
            self._remove_staged(requests)
            self._compact(batch_id)
            return
        actions: list[AddAction | RemoveAction] = [
            AddAction(path=c["path"], size=int(c["size"]), partition_values=c["partitionValues"],
                      modification_time=int(c["modificationTime"]), data_change=True, stats=c["stats"])
            for c in (r.committable for r in requests)]
        fault_point("delta.before_commit", batch_id=batch_id)
        table.create_write_transaction(actions, mode="overwrite" if self.overwrite else "append", schema=schema,
                                       partition_by=list(self.partition_columns) or None,
                                       commit_properties=properties)
        LOG.info("committed %d data files to %s as version %s (txn %s, %s)", len(actions), self.root,
                 table.version(), app_id, version)
        fault_point("delta.after_commit", batch_id=batch_id)
        self._compact(batch_id)

    def _merge(self, table: DeltaTable, schema: pa.Schema, requests: list[CommitRequest],
               properties: CommitProperties, batch_id: int | None) -> None:
        """``writeMode=upsert``: the staged changes of every request in ONE MERGE commit
        (:mod:`sparklink.delta.merge`); a batch whose tasks staged no row commits only its txn."""
        assert self.changelog is not None
        changes = read_staged(self.table, [r.committable for r in requests])
        fault_point("delta.before_commit", batch_id=batch_id)
        if changes is None or changes.num_rows == 0:
            table.create_write_transaction([], mode="append", schema=schema,
                                           partition_by=list(self.partition_columns) or None,
                                           commit_properties=properties)
            return
        merge_changes(table, self.changelog, changes, schema, self.root, table_invariants(table, self.root).not_null,
                      properties)

    def _replace_where(self, table: DeltaTable, schema: pa.Schema, requests: list[CommitRequest],
                       properties: CommitProperties) -> None:
        """``mode("overwrite")`` with ``replaceWhere``: the job's staged rows replace the rows
        matching the predicate in one version (delta-rs's predicate overwrite: the files holding
        matching rows are removed, their other rows rewritten with the new rows); a written row
        that does not match the predicate fails the job, nothing committed."""
        rows = read_staged(self.table, [r.committable for r in requests])
        data = pa.Table.from_arrays([rows.column(f.name).cast(f.type) for f in schema], schema=schema) \
            if rows is not None else schema.empty_table()
        try:
            write_deltalake(table, data, mode="overwrite", predicate=self.replace_where,
                            partition_by=list(self.partition_columns) or None, commit_properties=properties)
        except DeltaError as exc:
            raise ConfigError("replaceWhere", f"'{self.replace_where}' on {self.root}: {exc}",
                              "a SQL predicate over the table's columns that every written row matches") from exc

    def _remove_staged(self, requests: list[CommitRequest]) -> None:
        """The staged rows of ``requests`` once their commit is in the table (a roll-forward
        finds the txn there and never reads them again); other attempts' staged files of a
        stream's micro-batch go in the sink's ``post_commit``."""
        for request in requests:
            if request.committable.get("staged"):
                self.table.delete(request.committable["path"])

    def _compact(self, batch_id: int | None) -> None:
        """After the commit of micro-batch ``batch_id`` when it is the N-th: rewrite the table's
        small files (:mod:`sparklink.delta.compaction`: one commit of ``remove`` + ``add``
        actions, all ``dataChange=false``, refused when another commit removed a file it
        rewrites), its commitInfo marked ``sparklink.compaction = <appId>:<batch_id>``. The
        marker, looked for first among the versions since the micro-batch's own commit (whose
        commitInfo says ``sparklink.batch = <appId>:<batch_id>``), makes it run once per
        micro-batch: a roll-forward after a crash finds it and does not compact again. The new
        files are written before the one commit, so a crash in between leaves only files no
        version references, which the next attempt removes. The micro-batch's data is committed
        either way."""
        if self.compaction is None or batch_id is None or self.stream_app_id is None:
            return
        if (batch_id + 1) % self.compaction.every:
            return
        marker = f"{self.stream_app_id}:{batch_id}"
        table = self._reload()
        if compaction_done(table, marker):
            LOG.info("compaction after micro-batch %s of %s is already committed", batch_id, self.root)
            return
        fault_point("delta.before_compaction", batch_id=batch_id)
        partition_columns = tuple(table.metadata().partition_columns)
        bins = plan_bins(table, partition_columns, self.compaction.target_file_size)
        if not bins:
            LOG.info("compaction after micro-batch %s of %s: no two small files in one partition", batch_id, self.root)
            return
        table_schema = pa.schema(table.schema().to_arrow())
        data_schema = pa.schema([f for f in table_schema if f.name not in partition_columns])
        tag = file_tag(self.stream_app_id, "")
        written = [rewrite_bin(self.table, bin_, data_schema, partition_columns, tag, batch_id, self.parquet)
                   for bin_ in bins]
        if commit_compaction(self.table, bins, written, marker=marker, partition_columns=partition_columns,
                             batch_id=batch_id):
            LOG.info("compacted %s after micro-batch %s: %s files into %s", self.root, batch_id,
                     sum(len(b.files) for b in bins), len(written))
        remove_crashed_rewrites(self.table, tag, batch_id, {c["path"] for c in written})
        fault_point("delta.after_compaction", batch_id=batch_id)
