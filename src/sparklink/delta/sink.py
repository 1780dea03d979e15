"""The ``sparklink.delta`` sink (Sink V2 shape): executors write Parquet data files, the driver
commits each micro-batch (or ``df.write`` job) as one Delta transaction.

* executors: :class:`~sparklink.delta.files.DeltaFileWriter`, one per task (with
  ``writeMode=upsert`` and ``replaceWhere`` it stages the task's rows under
  ``_sparklink/staged-changes/`` for the driver: :mod:`sparklink.delta.merge`);
* driver: :class:`~sparklink.delta.committer.DeltaCommitter` inside the SDK's commit protocol
  (commit log in the checkpoint, roll-forward after a crash, replays discarded);
* after a micro-batch's commit (driver), :meth:`DeltaSink.post_commit` removes data files of that
  micro-batch that a failed attempt of this very stream left behind;
* the table lives on local disk or S3 (:class:`~sparklink.delta.table_location.TableLocation`);
  on S3 each run of a stream first checks that the store honours conditional writes.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from sparklink.delta.app_id import stream_app_id
from sparklink.delta.committer import DeltaCommitter
from sparklink.delta.config import DeltaSinkConfig, DeltaSinkOptions
from sparklink.delta.files import STAGED_DIRECTORY, DeltaFileWriter, batch_prefix, file_tag, utc_schema
from sparklink.delta.invariants import Invariants, table_invariants
from sparklink.delta.table_location import load_table
from sparklink.errors import ConfigError
from sparklink.faults import fault_point
from sparklink.formats.config import FormatConfig
from sparklink.sink import Committable, Sink, WriterContext
from sparklink.sink.sink import RestoreContext

LOG = logging.getLogger(__name__)


class DeltaSink(Sink):
    """Built from the options on the driver (validated there), pickled to the tasks."""

    def __init__(self, options: Mapping[str, str] | None, schema: StructType):
        super().__init__(options, schema)
        self.config = DeltaSinkConfig.from_options(options, [f.name for f in schema.fields])
        self.arrow_schema = utc_schema(to_arrow_schema(schema, timezone="UTC"))
        self.parquet = FormatConfig(name="parquet")
        self.app_id: str | None = None  # a stream's: set by prepare_tasks, travels to the tasks
        # what the tasks enforce (NOT NULL columns): set by prepare_tasks from the table
        self.invariants = Invariants(not_null=tuple(f.name for f in self.arrow_schema if not f.nullable))
        self.overwrite = False  # df.write mode("overwrite"): set by prepare_overwrite

    @classmethod
    def validate(cls, options: Mapping[str, str] | None, schema: StructType) -> None:
        """The options against the input's columns (unknown or misspelt options, partition
        columns not in the input, ...), nothing read or written (``sparklink run --check``)."""
        DeltaSinkConfig.from_options(options, [f.name for f in schema.fields])

    # ---------------------------------------------------------------- driver
    def prepare_overwrite(self) -> None:
        """Driver, ``df.write`` with ``mode("overwrite")``: the job's commit replaces the table's
        rows (those matching ``replaceWhere`` when given) in one version."""
        if self.config.changelog is not None:
            raise ConfigError("mode", "'overwrite' is not served with writeMode=upsert (an upsert changes rows by key)",
                              "append")
        self.overwrite = True

    def _stream_app_id(self) -> str:
        if self.config.txn_app_id is not None:
            raise ConfigError(DeltaSinkOptions.txn_app_id.key, "applies to df.write (idempotent foreachBatch writes); a stream's "
                              "application id is made once per checkpoint and kept in it")
        if self.config.checkpoint is None:
            raise ConfigError(DeltaSinkOptions.checkpoint_location.key, "is required for a stream into sparklink.delta")
        return stream_app_id(self.config.checkpoint)

    def restore(self, context: RestoreContext) -> None:
        """Driver, once per run of a stream: an S3 store must honour conditional writes (the
        commits of delta-rs rely on ``If-None-Match``)."""
        self.config.table.check_conditional_writes()

    def prepare_tasks(self) -> None:
        """Driver, before the tasks of every micro-batch (and of a ``df.write`` job, which has no
        checkpoint): the stream's application id names the tasks' files; an existing table's
        partition columns are the write's when ``partitionColumns`` is not given; its invariants
        are enforced by the tasks, or the table is refused (:mod:`sparklink.delta.invariants`)."""
        if self.config.checkpoint is not None:
            self.app_id = self._stream_app_id()
            if self.config.replace_where is not None:
                raise DeltaSinkOptions.replace_where.inapplicable("stream")
        elif self.config.replace_where is not None and not self.overwrite:
            raise ConfigError(DeltaSinkOptions.replace_where.key, "applies to df.write with mode(\"overwrite\"); this "
                              "write appends", ".mode(\"overwrite\")")
        elif self.config.compaction is not None:
            raise DeltaSinkOptions.compaction_every.inapplicable("df.write")
        table = load_table(self.config.table)
        if table is None:
            return
        self.invariants = table_invariants(table, self.config.table.uri())
        if not self.config.partition_columns_given:
            partition_columns = tuple(table.metadata().partition_columns)
            missing = [c for c in partition_columns if c not in self.arrow_schema.names]
            if missing:
                raise ConfigError(DeltaSinkOptions.partition_columns.key, f"the table {self.config.table.uri()} is "
                                  f"partitioned by {list(partition_columns)}; the input lacks {', '.join(missing)}")
            self.config = dataclasses.replace(self.config, partition_columns=partition_columns)

    def create_committer(self) -> DeltaCommitter:
        stream_app_id = self._stream_app_id() if self.config.checkpoint is not None else None
        return DeltaCommitter(table=self.config.table, schema=self.table_schema(), stream_app_id=stream_app_id,
                              txn_app_id=self.config.txn_app_id,
                              partition_columns=self.config.partition_columns, txn_version=self.config.txn_version,
                              merge_schema=self.config.merge_schema, user_metadata=self.config.user_metadata,
                              compaction=self.config.compaction,
                              partition_columns_given=self.config.partition_columns_given,
                              changelog=self.config.changelog, overwrite=self.overwrite,
                              replace_where=self.config.replace_where)

    def table_schema(self) -> pa.Schema:
        """The input's schema as the table holds it: partition columns last, as Delta readers
        return them; without the ``opColumn`` of ``writeMode=upsert``."""
        dropped = set(self.config.partition_columns)
        if self.config.changelog is not None and self.config.changelog.op_column is not None:
            dropped.add(self.config.changelog.op_column)
        data = [f for f in self.arrow_schema if f.name not in dropped]
        return pa.schema(data + [self.arrow_schema.field(c) for c in self.config.partition_columns])

    def discard(self, committables: list[Committable]) -> None:
        """Files of a replay of a committed batch or of a failed job: never in any commit."""
        for committable in committables:
            self.config.table.delete(committable["path"])

    def post_commit(self, batch_id: int | None, committables: list[Committable]) -> None:
        """Remove this stream's files of micro-batch ``batch_id`` that its commit did not take:
        they carry the stream's tag and the batch id in their name, the batch is committed (its
        txn is in the table), and Spark never commits a batch twice, so no commit can ever take
        them. Only the directories the committed files are in are listed (a replay writes the
        same partitions); files elsewhere are left to VACUUM."""
        if batch_id is None or not committables:
            return
        prefix = batch_prefix(file_tag(self._stream_app_id(), ""), batch_id)
        if self.config.changelog is not None:
            # staged changes: no version ever references them, so every attempt's go once committed
            fault_point("delta.before_cleanup", batch_id=batch_id)
            for relative in self.config.table.names_in(STAGED_DIRECTORY.rstrip("/"), prefix):
                LOG.info("removing %s, staged changes of committed micro-batch %s", relative, batch_id)
                self.config.table.delete(relative)
            return
        kept = {c["path"] for c in committables}
        fault_point("delta.before_cleanup", batch_id=batch_id)
        for directory in {c["path"].rpartition("/")[0] for c in committables}:
            for relative in self.config.table.names_in(directory, prefix):
                if relative not in kept:
                    LOG.info("removing %s, a failed attempt's data file of micro-batch %s", relative, batch_id)
                    self.config.table.delete(relative)

    # ---------------------------------------------------------------- executors
    def create_writer(self, context: WriterContext) -> DeltaFileWriter:
        if context.batch_id is not None and self.app_id is None:
            # Spark's adapter runs prepare_tasks on the driver first; a writer built directly
            # (the conformance suite's simulated tasks) reads the checkpoint's id itself
            self.app_id = self._stream_app_id()
        tag = file_tag(self.app_id if context.batch_id is not None else None, context.job_id)
        if self.config.changelog is not None or (self.overwrite and self.config.replace_where is not None):
            # writeMode=upsert (and replaceWhere): the task stages its changes (every column, the opColumn too, in
            # the batch's order) for the committer's one MERGE; NOT NULL is checked there, on the
            # upserts (a delete carries only its key); replaceWhere's rows go to delta-rs's
            # predicate overwrite
            return DeltaFileWriter(table=self.config.table, context=context, tag=tag, partition_columns=(),
                                   target_file_size=self.config.target_file_size, parquet=self.parquet,
                                   directory=STAGED_DIRECTORY,
                                   extra={"staged": True, "tablePartitionColumns": list(self.config.partition_columns)})
        return DeltaFileWriter(table=self.config.table, context=context, tag=tag,
                               partition_columns=self.config.partition_columns,
                               target_file_size=self.config.target_file_size, parquet=self.parquet,
                               not_null=self.invariants.not_null)
