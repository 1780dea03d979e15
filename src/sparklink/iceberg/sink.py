"""The ``sparklink.iceberg`` sink: Sink V2 shape, one Iceberg snapshot per micro-batch.

* driver, every micro-batch (:meth:`IcebergSink.prepare_tasks`): load the catalog, create the
  namespace and the table from the stream's schema when absent, read its location and identity
  partition columns (they travel to the tasks with the pickled sink);
* executors (:class:`~sparklink.iceberg.writer.IcebergWriter`): Parquet data files under
  ``<table location>/data/``;
* driver, the commit (:class:`IcebergCommitter`): look for the batch's snapshot in the ancestry of
  the current snapshot; if absent, ``add_files`` in one transaction whose snapshot summary names
  the writer and the batch (:mod:`sparklink.iceberg.identity`). pyiceberg retries a lost
  compare-and-swap on refreshed metadata with the table's ``commit.retry.*`` properties; when
  those are exhausted the SDK's committer retries (looking at the ancestry again first).

Fault points: ``iceberg.after_write`` (task), ``iceberg.before_commit`` and
``iceberg.after_commit`` (driver: after the catalog committed, before Spark's commit log).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TypeVar

import pyarrow as pa
from pyspark.sql.types import StructType

from sparklink.errors import CommitError, ConfigError
from sparklink.faults import fault_point
from sparklink.iceberg.config import MAIN_BRANCH
from sparklink.iceberg.data_files import data_file, resolve_columns
from sparklink.iceberg.identity import (
    WriterIdentity,
    checkpoint_identity,
    find_committed,
    find_txn,
    job_identity,
    txn_summary,
)
from sparklink.iceberg.sink_config import IcebergSinkConfig, IcebergSinkOptions
from sparklink.iceberg.sweep import mark_restored, owner_tag, sweep_once, txn_owner_tag
from sparklink.iceberg.upsert import commit_changes
from sparklink.iceberg.writer import (
    PARQUET,
    IcebergWriter,
    PartitionTransform,
    check_location,
    remove_data_file,
    table_parquet_format,
)
from sparklink.options import CHECKPOINT_LOCATION
from sparklink.options import checkpoint_location as checkpoint_option
from sparklink.sink import CommitRequest, Committable, Committer, Sink, WriterContext
from sparklink.sink.sink import RestoreContext

T = TypeVar("T")

LOG = logging.getLogger(__name__)
MAX_FORMAT_VERSION = 2


def checkpoint_location(options: Mapping[str, str]) -> Path | None:
    value = checkpoint_option(options)
    return Path(value) if value is not None else None


def load_or_create_table(config: IcebergSinkConfig, schema: StructType):
    """The table (driver side), created from ``schema`` (unpartitioned, every column optional)
    when absent."""
    from pyiceberg.exceptions import NoSuchTableError

    catalog = config.load_catalog()
    try:
        return catalog.load_table(config.identifier)
    except NoSuchTableError:
        pass
    from pyspark.sql.pandas.types import to_arrow_schema

    try:
        catalog.create_namespace_if_not_exists(config.namespace)
    except Exception:  # noqa: BLE001 - a catalog's own error when another writer made it meanwhile
        # (the SQL catalog checks, then inserts: two queries creating one namespace at once get a
        # sqlite IntegrityError rather than NamespaceAlreadyExistsError); any other failure is raised
        if not catalog.namespace_exists(config.namespace):
            raise
    LOG.info("creating Iceberg table %s from the stream's schema", config.table_name)
    # Spark's TIMESTAMP is an instant: Iceberg's timestamptz (UTC); TIMESTAMP_NTZ is timestamp. Every
    # column is created optional: a first input of literals (never null) must not make the table
    # refuse every later input that may hold nulls
    arrow_schema = to_arrow_schema(schema, timezone="UTC")
    changelog = config.changelog
    arrow_schema = pa.schema([field.with_nullable(True) for field in arrow_schema
                              if changelog is None or field.name != changelog.op_column])
    return catalog.create_table_if_not_exists(config.identifier, schema=arrow_schema)


def check_format_version(table, table_name: str) -> None:
    if table.metadata.format_version > MAX_FORMAT_VERSION:
        raise ConfigError("table", f"'{table_name}' is Iceberg format v{table.metadata.format_version}; this sink "
                          f"writes format v1 and v2 tables")


def partition_fields(table, table_name: str) -> list:
    """The table's partition fields (``PartitionField``: source id, transform, name). Identity
    fields are written from the exact input values; the transforms pyiceberg serves with
    ``pyiceberg-core`` (``year``, ``month``, ``day``, ``hour``, ``bucket[N]``, ``truncate[W]``) through
    its Arrow transforms; ``void`` and unknown transforms are refused naming the column."""
    from pyiceberg.transforms import (
        BucketTransform,
        DayTransform,
        HourTransform,
        IdentityTransform,
        MonthTransform,
        TruncateTransform,
        YearTransform,
    )

    served = (IdentityTransform, BucketTransform, TruncateTransform, YearTransform, MonthTransform, DayTransform,
              HourTransform)
    check_format_version(table, table_name)
    schema = table.schema()
    for field in table.spec().fields:
        if not isinstance(field.transform, served):
            raise ConfigError("table", f"'{table_name}' is partitioned by {field.transform} of column "
                              f"'{schema.find_column_name(field.source_id)}', which this sink does not write",
                              "identity, year, month, day, hour, bucket[N] or truncate[W] partition fields")
    return list(table.spec().fields)


def ensure_branch(config: IcebergSinkConfig, table):  # -> Table | None
    """The table, with ``config.branch`` created from the current snapshot when absent (as
    Iceberg's Java writers fork a new branch from the main branch's state; pyiceberg alone would
    start it without a parent). None when a concurrent change of the table made the creation
    fail (the caller retries). A tag of that name, or a table without any snapshot to fork from,
    is refused."""
    from pyiceberg.exceptions import CommitFailedException
    from pyiceberg.table.refs import SnapshotRefType

    branch = config.branch
    ref = table.metadata.refs.get(branch)
    if ref is not None:
        if ref.snapshot_ref_type != SnapshotRefType.BRANCH:
            raise ConfigError("branch", f"'{branch}' of {config.table_name} is a tag, not a branch")
        return table
    if branch == MAIN_BRANCH:
        return table  # a table without snapshots: its first commit makes main
    current = table.current_snapshot()
    if current is None:
        raise ConfigError("branch", f"table {config.table_name} has no snapshot yet, so branch '{branch}' has "
                          "nothing to start from", "write to main first, or create the branch")
    try:
        table.manage_snapshots().create_branch(current.snapshot_id, branch).commit()
        LOG.info("created branch %s of %s at snapshot %s", branch, config.table_name, current.snapshot_id)
    except CommitFailedException:
        pass  # another writer changed the table meanwhile (perhaps made the branch): look again
    table = config.load_catalog().load_table(config.identifier)
    return table if branch in table.metadata.refs else None


def append_files(table, committables: list, summary: dict[str, str], branch: str, table_name: str,
                 overwrite: str | None = None) -> None:
    """One transaction (driver side): the committables' data files appended to ``branch`` in one
    snapshot whose summary holds ``summary``. Data files are built by
    :func:`~sparklink.iceberg.data_files.data_file` (columns through the name mapping, exact
    partition values); the append is the one ``add_files`` makes (fast, or merging manifests
    when ``commit.manifest-merge.enabled``), and like ``add_files`` the first commit sets the
    table's ``schema.name-mapping.default`` (the files carry no field ids).

    ``overwrite`` (a ``df.write`` in mode ``overwrite``: a filter expression, ``true`` for the whole
    table): pyiceberg's ``delete`` of the matching rows (whole files dropped, partly matching
    ones rewritten) in the same transaction, so one catalog commit replaces them (two snapshots,
    both with ``summary``). pyiceberg's retry of that stale plan is switched off: a lost swap
    raises ``CommitFailedException`` and the SDK's retry plans again."""
    from pyiceberg.table import TableProperties

    with table.transaction() as transaction:
        if transaction.table_metadata.name_mapping() is None:
            transaction.set_properties(**{TableProperties.DEFAULT_NAME_MAPPING:
                                          transaction.table_metadata.schema().name_mapping.model_dump_json()})
        files = [data_file(table.io, transaction.table_metadata, c, table_name) for c in committables]
        if overwrite is not None:
            transaction.delete(delete_filter=overwrite, snapshot_properties=summary, branch=branch)
        # the producer add_files uses (pinned pyiceberg 0.12): fast append, or merge per the table's property
        with transaction._append_snapshot_producer(summary, branch=branch) as append:
            for file in files:
                append.append_data_file(file)
        if overwrite is not None:
            transaction._snapshot_producers = []  # no re-application of a stale delete plan


class IcebergCommitter(Committer):
    """Driver side: commits every committable of one batch as one snapshot, idempotently."""

    def __init__(self, sink: "IcebergSink"):
        self.sink = sink

    def commit(self, requests: list[CommitRequest]) -> None:

        if not requests:
            return
        batch_id = requests[0].batch_id
        identity = self.sink.identity(requests[0].committable.get("job"), batch_id)
        if self.sink.config.changelog is not None:
            self.commit_changes(requests, identity, batch_id)
            return
        table = self.sink.config.load_catalog().load_table(self.sink.config.identifier)
        branch = self.sink.config.branch
        found = find_committed(table, identity, batch_id, branch)
        if found is not None:
            LOG.info("batch %s of %s is already snapshot %s of %s", batch_id, identity.app_id, found.snapshot_id,
                     self.sink.config.table_name)
            for request in requests:
                request.signal_already_committed()
            self.sink.sweep(batch_id, identity)
            return
        txn = self.sink.config.txn
        if txn is not None:
            recorded = find_txn(table, txn, branch)
            if recorded is not None:  # committed by an earlier attempt of this write: its files are not these
                LOG.warning("df.write %s is already committed (snapshot %s of %s); skipped", txn,
                            recorded.snapshot_id, self.sink.config.table_name)
                self.sink.discard([r.committable for r in requests])
                for request in requests:
                    request.signal_already_committed()
                self.sink.sweep(batch_id, identity)
                return
        fault_point("iceberg.before_commit", batch_id=batch_id)
        table = ensure_branch(self.sink.config, table)
        if table is None:
            LOG.warning("batch %s: branch %s of %s could not be created (concurrent changes); retrying", batch_id,
                        branch, self.sink.config.table_name)
            for request in requests:
                request.retry_later()
            return
        summary = identity.summary(batch_id) | (txn_summary(txn) if txn is not None else {})
        committed, _ = self._settle(
            requests, batch_id,
            lambda: append_files(table, [r.committable for r in requests], summary, branch,
                                 self.sink.config.table_name, overwrite=self.sink.overwrite_condition()),
            lost="the commit to %s lost to another writer after the table's commit.retry.* attempts",
            failed="adding data files to")
        if not committed:
            return
        fault_point("iceberg.after_commit", batch_id=batch_id)
        self.sink.sweep(batch_id, identity)

    def _settle(self, requests: list[CommitRequest], batch_id: int | None, commit: Callable[[], T], *, lost: str,
                failed: str) -> tuple[bool, T | None]:
        """Run ``commit`` (driver); on a lost race (``CommitFailedException``) every request is
        retried later, on a refused commit each fails naming the table (``lost``: a log format with
        one ``%s`` for the table; ``failed``: what was being done to it). ``(True, result)`` when
        it committed, ``(False, None)`` when the requests are settled otherwise."""
        from pyiceberg.exceptions import CommitFailedException

        table_name = self.sink.config.table_name
        try:
            return True, commit()
        except CommitFailedException as exc:
            LOG.warning("batch %s: " + lost + " (%s); retrying", batch_id, table_name, exc)
            for request in requests:
                request.retry_later()
        except (ValueError, FileNotFoundError, CommitError) as exc:
            for request in requests:
                request.signal_failed_with_unknown_reason(
                    CommitError(f"batch {batch_id}: {failed} {table_name} failed: {exc}"))
        return False, None

    def commit_changes(self, requests: list[CommitRequest], identity: WriterIdentity, batch_id: int | None) -> None:
        """``writeMode=upsert``: the staged changes merged in one snapshot (:mod:`sparklink.iceberg.upsert`)."""
        from pyiceberg.exceptions import CommitFailedException

        config = self.sink.config
        changelog = config.changelog
        assert changelog is not None
        committables = [r.committable for r in requests]
        summary = identity.summary(batch_id) | (txn_summary(config.txn) if config.txn is not None else {})
        txn = config.txn

        def already_committed(table) -> bool:
            return find_committed(table, identity, batch_id, config.branch) is not None or (
                txn is not None and find_txn(table, txn, config.branch) is not None)

        def load():
            table = ensure_branch(config, config.load_catalog().load_table(config.identifier))
            if table is None:
                raise CommitFailedException(f"branch {config.branch} could not be created (concurrent changes)")
            return table

        committed, stats = self._settle(
            requests, batch_id,
            lambda: commit_changes(load, changelog, committables, summary=summary, branch=config.branch,
                                   already_committed=already_committed, owner_tag=self.sink.owner_for(identity),
                                   before_commit=lambda: fault_point("iceberg.before_commit", batch_id=batch_id)),
            lost="the merge into %s lost to other writers", failed="merging changes into")
        if not committed:
            return
        if stats is None:
            LOG.info("batch %s of %s: already committed to %s, or no change", batch_id, identity.app_id,
                     config.table_name)
        fault_point("iceberg.after_commit", batch_id=batch_id)
        self.sink.discard(committables)  # the staged changes: never part of the table
        self.sink.sweep(batch_id, identity)


class IcebergSink(Sink):
    """Validates the options on the driver; its table facts are loaded in :meth:`prepare_tasks`."""

    def __init__(self, options: Mapping[str, str] | None, schema: StructType):
        super().__init__(options, schema)
        self.config = IcebergSinkConfig.from_options(self.options)
        if self.config.changelog is not None:
            self.config.changelog.check_columns(schema.fieldNames())
        self.owner: str = ""  # the tag in this writer's file names (sweep.owner_tag), set when planning
        self.checkpoint = checkpoint_location(self.options)
        self.location: str | None = None
        self.partition_columns: list[str] = []
        self.transforms: list[PartitionTransform] = []
        self.parquet = PARQUET  # the table's Parquet write properties, loaded in prepare_tasks
        self.overwrite = False  # a df.write in mode overwrite (prepare_overwrite)
        self.txn_committed_already = False

    @classmethod
    def validate(cls, options: Mapping[str, str] | None, schema: StructType) -> None:
        """The options parsed as the sink parses them (unknown keys refused with the closest known
        one), nothing loaded or written (``sparklink run --check``)."""
        config = IcebergSinkConfig.from_options(options)
        if config.changelog is not None:
            config.changelog.check_columns(schema.fieldNames())

    def identity(self, job_id: str | None, batch_id: int | None) -> WriterIdentity:
        if batch_id is not None and self.config.txn is not None:
            raise IcebergSinkOptions.txn_app_id.inapplicable("df.writeStream")
        if batch_id is None:
            if not job_id:
                raise CommitError("a df.write commit without its job id")
            return job_identity(job_id, self.config.app_id)
        if self.checkpoint is None:
            raise ConfigError(CHECKPOINT_LOCATION.key, "is required for a streaming write to sparklink.iceberg")
        return checkpoint_identity(self.checkpoint, self.config.app_id)

    def restore(self, context: RestoreContext) -> None:
        if self.checkpoint is not None:
            mark_restored(self.config.table_name, owner_tag(checkpoint_identity(self.checkpoint, self.config.app_id)))

    def prepare_overwrite(self) -> None:
        """Driver, a ``df.write`` in mode ``overwrite``: the commit replaces the rows of
        ``overwriteFilter`` (the whole table without it). Refused with ``writeMode=upsert``."""
        if self.config.changelog is not None:
            raise ConfigError("mode", "overwrite is not served with writeMode=upsert", "mode append")
        self.overwrite = True

    def overwrite_condition(self) -> str | None:
        """The rows the commit replaces: None (append), the filter, or ``true`` (the whole table)."""
        if not self.overwrite:
            if self.config.overwrite_filter is not None:
                raise ConfigError(IcebergSinkOptions.overwrite_filter.key, "applies to df.write with "
                                  "mode(\"overwrite\") only, not to an append", "add .mode(\"overwrite\")")
            return None
        return self.config.overwrite_filter or "true"

    def owner_for(self, identity: WriterIdentity) -> str:
        """The owner tag in this writer's file names (:mod:`sparklink.iceberg.sweep`); empty for a
        ``df.write`` without ``txnAppId`` (its files are never swept: Spark's job abort removes them)."""
        if self.checkpoint is not None:
            return owner_tag(identity)
        return txn_owner_tag(self.config.txn.app_id) if self.config.txn is not None else ""

    def sweep(self, batch_id: int | None, identity: WriterIdentity) -> None:
        """Driver, after a commit: remove this writer's files of failed attempts (once per process
        and after each restore; :mod:`sparklink.iceberg.sweep`)."""
        owner = self.owner_for(identity)
        up_to = batch_id if batch_id is not None else (self.config.txn.version if self.config.txn else None)
        if owner and up_to is not None:
            sweep_once(lambda: self.config.load_catalog().load_table(self.config.identifier), self.config.table_name,
                       self.config.catalog_properties, owner, up_to)

    def prepare_tasks(self) -> None:
        """Driver, every micro-batch (and once per ``df.write`` job): the table (created when
        absent), its branch, the input's columns matched with the table's fields (through its
        name mapping, so a renamed column is served), the identity partition columns, and for a
        ``df.write`` with ``txnAppId`` / ``txnVersion`` whether it is already committed (then the
        tasks write nothing)."""
        table = ensure_branch(self.config, load_or_create_table(self.config, self.schema))
        if table is None:  # a concurrent change; the commit makes the branch
            table = self.config.load_catalog().load_table(self.config.identifier)
        changelog = self.config.changelog
        columns = self.schema.fieldNames()
        if changelog is None:
            fields = partition_fields(table, self.config.table_name)
        else:  # the changes are staged unpartitioned; the merge writes with the table's spec (any transform)
            check_format_version(table, self.config.table_name)
            fields = []
            columns = changelog.stored_columns(columns)
        partition_ids = [field.source_id for field in fields]
        by_id = {field_id: column for column, field_id in
                 resolve_columns(table.metadata, columns, self.config.table_name).items()}
        missing = [table.schema().find_column_name(i) for i in partition_ids if i not in by_id]
        if missing:
            raise ConfigError("table", f"partition column(s) {', '.join(str(m) for m in missing)} of "
                              f"'{self.config.table_name}' are not in the stream's columns "
                              f"{', '.join(self.schema.fieldNames())}")
        from pyiceberg.transforms import IdentityTransform

        self.partition_columns = [by_id[i] for i in partition_ids]
        self.transforms = [] if all(isinstance(f.transform, IdentityTransform) for f in fields) else [
            PartitionTransform(column=by_id[f.source_id], transform=str(f.transform), name=f.name,
                               source_type=table.schema().find_field(f.source_id).field_type.model_dump_json())
            for f in fields]
        check_location(table.location())
        self.parquet = table_parquet_format(table.properties, self.config.table_name)
        self.location = table.location()
        txn = self.config.txn
        self.txn_committed_already = txn is not None and find_txn(table, txn, self.config.branch) is not None
        if self.checkpoint is not None:
            self.owner = owner_tag(checkpoint_identity(self.checkpoint, self.config.app_id))
        elif txn is not None:
            self.owner = txn_owner_tag(txn.app_id)
        if self.txn_committed_already:
            LOG.warning("df.write %s is already committed to %s; its tasks write nothing", txn, self.config.table_name)

    def create_writer(self, context: WriterContext) -> IcebergWriter:
        self.overwrite_condition()  # overwriteFilter without mode overwrite: refused before anything is written
        if self.location is None:  # a sink built outside Spark's planning (tests); executors get it loaded
            self.prepare_tasks()
        if self.location is None:
            raise CommitError(f"the location of {self.config.table_name} is unknown after planning")
        return IcebergWriter(self.location, self.partition_columns, context, self.io_properties(),
                             skip=self.txn_committed_already, owner=self.owner,
                             version=self.config.txn.version if self.config.txn is not None else None,
                             transforms=self.transforms, parquet=self.parquet,
                             changes=self.config.changelog is not None)

    def create_committer(self) -> IcebergCommitter:
        return IcebergCommitter(self)

    def io_properties(self) -> dict[str, str]:
        """The catalog's properties, which hold its FileIO's (``s3.endpoint``, ...); they travel
        to the executors inside the pickled sink, as every option does, and are never logged."""
        return dict(self.config.catalog_properties)

    def discard(self, committables: list[Committable]) -> None:
        for committable in committables:
            remove_data_file(committable["file"], self.io_properties())
