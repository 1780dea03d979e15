"""``sparklink.files`` as a sink: Flink's FileSink on Spark (driver and executors).

Spark builds a :class:`FileSinkConnector` on the driver for every micro-batch (and for each
``df.write`` job) from the user's options; every option is validated there, so a bad option
fails the query before anything is written. The SDK lifecycle (:mod:`sparklink.sink.recovery`)
then, for a streaming query:

1. checks, every micro-batch, the owner claim (``_sparklink/owner.json``; the query id comes
   from the checkpoint's ``metadata``), the last commit log entry and the last state
   (:meth:`FileSinkConnector.check`), so a second query is refused before its tasks write;
2. once per query run (or at once when that check finds a problem) restores: claims the
   output, checks the whole metadata (:mod:`sparklink.files.sink.consistency`), rebuilds what
   can be rebuilt exactly or refuses naming the file, rolls an unfinished commit forward (and completes a ``sparklink.files.finish`` a
   crash interrupted);
3. reads the committed state of the last batch (:meth:`FileSinkConnector.prepare_tasks`),
   whose carried in-progress files travel to the tasks with the pickled sink.

Layout under ``path`` (ARCHITECTURE.md, "The file sink's invariants")::

    _sparklink/commits/<batchId>.json     the SDK commit log
    _sparklink/state/<batchId>.json       the committed state of the file sink
    _sparklink/owner.json                 the streaming query that owns the output
    _sparklink/lease.json (+ lease.lock)  the running query's lease, renewed every micro-batch
    _sparklink/sink.json                  the sink's options and schema (for sparklink.files.finish)
    _sparklink/manifest/compact.json      the live finished files of older batches
    _spark_metadata/<n>[.compact]         Spark's file sink log (sparkMetadata, default true)
    <bucket>/.part-<uid>-<n><suffix>.inprogress.<tag>   in-progress / pending (hidden)
    <bucket>/part-<uid>-<n><suffix>                     finished

Everything is written through two seams of the output's storage (:mod:`sparklink.storage`),
local disk or S3 (``s3://bucket/prefix`` or ``s3a://``): metadata objects
(:class:`~sparklink.storage.base.FileStorage`, conditional writes) at the names of
:class:`~sparklink.files.sink.layout.OutputLayout`, and part files
(:class:`~sparklink.storage.recoverable.RecoverableWriter`: hidden files renamed on local disk,
multipart uploads completed on S3). No code here knows which store it runs on.
"""

from __future__ import annotations

import base64
import dataclasses
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.types import StructType

from sparklink.errors import ConfigError, MetadataError
from sparklink.files.sink.bucket_assigners import (
    BasePathBucketAssigner,
    BucketAssigner,
    CallableBucketAssigner,
    ColumnBucketAssigner,
    DateTimeBucketAssigner,
    refuse_unreadable_layout,
)
from sparklink.files.sink.bucket_writer import FileSinkWriter
from sparklink.files.sink.committer import FileCommitter
from sparklink.files.sink.compaction import FileCompactStrategy
from sparklink.files.sink.layout import FINISH_INTENT, LEASE, OutputLayout
from sparklink.files.sink.manifest import STATE_RETENTION, FinishedFileManifest, file_retention
from sparklink.files.sink.options import (
    ASSIGNER_BASEPATH,
    ASSIGNER_COLUMN,
    ASSIGNER_CUSTOM,
    ASSIGNER_DATETIME,
    ASSIGNERS,
    POLICY_CHECKPOINT,
    POLICY_DEFAULT,
)
from sparklink.files.sink.options import FileSinkOptions as O
from sparklink.files.sink.output_file_config import OutputFileConfig
from sparklink.files.sink.output_schema import check_output_schema
from sparklink.files.sink.part_files import (
    COMPACTION_TAG,
    PartFile,
    finished_name,
    in_progress_name,
    job_part_file,
    relative,
    stream_part_file,
)
from sparklink.files.sink.recovery import finished_parts, record_sink, restore_output
from sparklink.files.sink.rolling_policies import (
    DefaultRollingPolicy,
    OnCheckpointRollingPolicy,
    RollingPolicy,
)
from sparklink.files.sink.state import SinkState, StateStore
from sparklink.files.spark_log import METADATA_DIR, SparkLog, SparkLogConfig, spark_log_config
from sparklink.formats.config import FormatConfig
from sparklink.options import Options
from sparklink.sink.commit_log import CommitLog
from sparklink.sink.lease import DEFAULT_LEASE_TIMEOUT, OutputLease
from sparklink.sink.sink import EndOfInput, RestoreContext, Sink
from sparklink.sink.writer import Committable, WriterContext
from sparklink.storage import parse_location
from sparklink.storage.base import FileStorage
from sparklink.storage.directory import StorageDirectory, StorageFile
from sparklink.storage.output import OutputStorage
from sparklink.storage.recoverable import RecoverableWriter

PATH = O.path.key
LOG = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class FileSinkConfig:
    """Everything the options say, validated (driver side, at query start)."""

    path: str
    format: FormatConfig
    assigner: BucketAssigner
    rolling_policy: RollingPolicy
    output: OutputFileConfig
    compaction: FileCompactStrategy | None
    spark_log: SparkLogConfig | None = None   # None: no _spark_metadata log (sparkMetadata=false)
    file_retention: float | None = None
    lease_timeout: float = DEFAULT_LEASE_TIMEOUT
    store: OutputStorage | None = None   # where the output lives (local disk or S3); from ``path``
    finish_at_end: bool = True   # finishAtEnd: the end of input of a query that ends without a crash

    def __post_init__(self) -> None:
        if self.store is None:
            object.__setattr__(self, "store", OutputStorage(location=parse_location(PATH, self.path)))
        if self.format.bulk and self.rolling_policy.carries_across_batches:
            raise ConfigError(O.rolling_policy.key, f"format '{self.format.name}' is a bulk format; its files roll "
                              "at every micro-batch", POLICY_CHECKPOINT)

    @classmethod
    def from_options(cls, options: Mapping[str, str] | None) -> "FileSinkConfig":
        opts = O.options(options)
        store = OutputStorage.from_options(parse_location(PATH, O.path.value(opts)), opts)
        fmt_name = O.format.value(opts)
        compression = O.compression.get(opts)
        row_group_bytes, row_group_rows = O.row_group_size.get(opts) or (None, None)
        O.write_buffer_size.check_applies(opts, fmt_name)
        O.header.check_applies(opts, fmt_name)
        format_config = FormatConfig(
            name=fmt_name,
            compression=compression.strip().lower() if compression is not None else None,
            row_group_bytes=row_group_bytes, row_group_rows=row_group_rows,
            write_buffer_size=O.write_buffer_size.value(opts),
            header=O.header.value(opts),
        )
        compaction = _compaction(opts)
        if compaction is not None:  # compaction reads pending files: staged at their hidden names
            store = dataclasses.replace(store, staged=True)
        spark_log = spark_log_config(opts, retention=file_retention(opts))
        assigner = _assigner(opts)
        if spark_log is not None:  # Spark's readers skip non-Hive directories silently: refuse such a layout
            assigner = refuse_unreadable_layout(assigner)
        return cls(path=store.uri(), format=format_config, assigner=assigner, rolling_policy=_policy(opts, format_config),
                   output=OutputFileConfig(part_prefix=O.part_prefix.value(opts), part_suffix=O.part_suffix.get(opts)),
                   compaction=compaction,
                   spark_log=spark_log,
                   file_retention=file_retention(opts), lease_timeout=O.lease_timeout.value(opts), store=store,
                   finish_at_end=O.finish_at_end.value(opts))


def _assigner(opts: Options) -> BucketAssigner:
    name = O.bucket_assigner.value(opts)
    column = O.bucket_column.get(opts)
    O.check_applies(opts, O.bucket_assigner.key, name)
    if name == ASSIGNER_DATETIME:
        return DateTimeBucketAssigner(format=O.bucket_format.value(opts), timezone=O.bucket_timezone.value(opts),
                                      column=column)
    if name == ASSIGNER_BASEPATH:
        return BasePathBucketAssigner()
    if name == ASSIGNER_COLUMN:
        if column is None:
            raise ConfigError(O.bucket_column.key, "is required with bucketAssigner 'column'")
        return ColumnBucketAssigner(column=column, hive_style=O.bucket_hive_style.value(opts))
    encoded = O.bucket_assigner_callable.get(opts)
    if encoded is None:
        raise ConfigError(O.bucket_assigner.key, f"'{ASSIGNER_CUSTOM}' is set by FileSink.with_bucket_assigner(callable)",
                          ", ".join(ASSIGNERS))
    from pyspark import cloudpickle

    try:
        function = cloudpickle.loads(base64.b64decode(encoded))
    except (ValueError, TypeError, AttributeError, ImportError, EOFError) as exc:
        raise ConfigError(O.bucket_assigner_callable.key, f"cannot load the bucket assigner function: {exc}") from None
    if isinstance(function, BucketAssigner):
        return function
    return CallableBucketAssigner(function=function)


def _policy(opts: Options, fmt: FormatConfig) -> RollingPolicy:
    name = O.rolling_policy.get(opts) or (POLICY_CHECKPOINT if fmt.bulk else POLICY_DEFAULT)
    size = O.max_part_size.get(opts)
    rollover = O.rollover_interval.get(opts)
    inactivity = O.inactivity_interval.get(opts)
    if name == POLICY_CHECKPOINT:
        # inactivityInterval is accepted (the public API's example sets it with 'checkpoint'); a file
        # rolled on checkpoint is written by one task and closed with its micro-batch, so it is
        # never inactive longer than a task runs.
        return OnCheckpointRollingPolicy(max_part_size=size, rollover_interval=rollover, inactivity_interval=inactivity)
    if fmt.bulk:
        raise ConfigError(O.rolling_policy.key, f"'default' carries files across micro-batches, which bulk format "
                          f"'{fmt.name}' cannot do", POLICY_CHECKPOINT)
    policy = DefaultRollingPolicy()
    if size is not None:
        policy = policy.with_max_part_size(size)
    if rollover is not None:
        policy = policy.with_rollover_interval(rollover)
    if inactivity is not None:
        policy = policy.with_inactivity_interval(inactivity)
    return policy


def _compaction(opts: Options) -> FileCompactStrategy | None:
    size = O.compaction_size_threshold.get(opts)
    every = O.compaction_every_n_checkpoints.get(opts)
    if size is None and every is None:
        return None
    return FileCompactStrategy(size_threshold=size, every_n_checkpoints=every)


class FileSinkConnector(Sink):
    """The file sink (driver: validation, committed state, committer, hooks; executors: writers)."""

    @classmethod
    def validate(cls, options: Mapping[str, str] | None, schema: StructType) -> None:
        """The options and the input's columns checked, nothing read or written under ``path``."""
        cls._validated(options, schema)

    @staticmethod
    def _validated(options: Mapping[str, str] | None, schema: StructType) -> tuple[FileSinkConfig, pa.Schema]:
        config = FileSinkConfig.from_options(options)
        arrow_schema = _arrow_schema(schema)
        config.format.validate(arrow_schema)
        config.assigner.validate(arrow_schema)
        return config, arrow_schema

    def __init__(self, options: Mapping[str, str] | None, schema: StructType):
        super().__init__(options, schema)
        self.config, self.arrow_schema = self._validated(options, schema)
        assert self.config.store is not None  # FileSinkConfig derives it from ``path``
        self.store: OutputStorage = self.config.store
        self._storage: FileStorage | None = None  # the driver's live storage (never pickled)
        self.csv_header = (self.config.format.row_encoder(self.arrow_schema).header()
                           if self.config.format.name == "csv" else b"")
        self.carried: list[PartFile] = []
        if self.config.spark_log is None and SparkLog(self.storage()).exists():
            raise ConfigError(O.spark_metadata.key, f"is false, but {self.storage().uri(METADATA_DIR)} exists: "
                              "Spark's readers would not see the files written from now on. Keep it true, or delete "
                              "that directory (Spark then lists the directory)")
        # a schema other than the recorded one is refused (output_schema.py), on every store
        check_output_schema(self.meta_directory(), schema, output=self.config.path,
                            merge_schema=O.merge_schema.value(Options(options)))
        record_sink(self.meta_directory(), self.options, schema.json())
        self.streaming = O.checkpoint_location.given(Options(options))

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_storage"] = None  # a live client never travels to the executors
        return state

    # ------------------------------------------------------------------ locations

    def storage(self) -> FileStorage:
        """The output's storage (driver side; one per sink object)."""
        if self._storage is None:
            self._storage = self.store.storage()
        return self._storage

    def part_files(self) -> RecoverableWriter:
        """The output's part-file seam on the driver's storage."""
        return self.store.part_files(self.storage())

    @property
    def layout(self) -> OutputLayout:
        return OutputLayout(self.storage())

    @property
    def seals_carried_in_place(self) -> bool:
        """Whether finishing a carried file fixes its content where it is (S3: completing its
        upload with the recorded parts), so ``sparklink.files.finish`` need not copy it."""
        return self.part_files().seals_in_place

    def meta_directory(self) -> StorageDirectory:
        """The output's ``_sparklink`` directory on its storage (driver side)."""
        return self.layout.meta

    def commit_log_dir(self) -> StorageDirectory:
        return self.layout.commits

    def owner_lock_path(self) -> StorageFile:
        return self.layout.owner

    def lease(self) -> OutputLease:
        """``_sparklink/lease.json``: renewed by every micro-batch, checked by ``sparklink.files.finish``
        (local disk and S3, through the storage seam)."""
        return OutputLease(directory=self.layout.meta, name=LEASE, timeout=self.config.lease_timeout,
                           output=self.config.path)

    def end_of_input(self) -> EndOfInput | None:
        """``sparklink.files.finish`` of this output when its query ends without a crash (held
        compaction inputs and carried files made visible), on local disk and S3.
        ``finishAtEnd=false``: none (carried files stay open for the next run)."""
        if not self.config.finish_at_end:
            return None
        return EndOfInput(kind="files.finish", target=self.config.path)

    def state_store(self) -> StateStore:
        return StateStore(self.layout.states)

    def spark_log(self) -> SparkLog | None:
        return SparkLog(self.storage(), self.config.spark_log) if self.config.spark_log is not None else None

    def manifest(self) -> FinishedFileManifest:
        spark_log = self.spark_log()
        return FinishedFileManifest(self.storage(), retention=self.config.file_retention, spark_log=spark_log,
                                    cleanup_delay=spark_log.config.cleanup_delay if spark_log else 0.0)

    # ------------------------------------------------------------------ lifecycle (driver)

    def check(self) -> str | None:
        """Every micro-batch: the last commit and the last state must be the same batch and the
        state must read (two directory listings, one small file)."""
        latest_commit = CommitLog(self.commit_log_dir()).latest_batch_id()
        store = self.state_store()
        state_ids = store.batch_ids()
        latest_state = state_ids[-1] if state_ids else None
        if latest_commit != latest_state:
            return (f"the last commit log entry is for batch {latest_commit} but the last state is for batch "
                    f"{latest_state}")
        if self.meta_directory().read(FINISH_INTENT) is not None:
            return "a sparklink.files.finish was interrupted"
        if latest_state is not None:
            try:
                store.get(latest_state)
            except MetadataError as exc:
                return str(exc)
        return None

    def restore(self, context: RestoreContext) -> None:
        """Once per query run (:func:`~sparklink.files.sink.recovery.restore_output`): repair the
        metadata or refuse the start, roll an unfinished commit and an interrupted
        ``sparklink.files.finish`` forward."""
        restore_output(self)

    def prepare_tasks(self) -> None:
        """Every micro-batch: the carried in-progress files of the last commit, for the tasks."""
        if self.streaming:
            self.carried = self.state_store().latest_before(None).in_progress

    # ------------------------------------------------------------------ executors

    def create_writer(self, context: WriterContext) -> FileSinkWriter:
        """Executor side, once per task."""
        carry = context.streaming and self.config.rolling_policy.carries_across_batches
        carried = {f.bucket: f for f in self.carried if f.partition == context.partition_id} if carry else {}
        return FileSinkWriter(output=self.store, context=context, format_config=self.config.format,
                              assigner=self.config.assigner, rolling_policy=self.config.rolling_policy,
                              output_config=self.config.output, carried=carried, carry=carry)

    # ------------------------------------------------------------------ driver hooks

    def plan_name(self, bucket: str, batch_id: int, index: int) -> tuple[str, str]:
        final = finished_name(self.config.output.part_prefix, f"c{batch_id:08d}", index,
                              self.config.output.suffix_for(self.config.format.extension))
        return relative(bucket, in_progress_name(final, COMPACTION_TAG)), relative(bucket, final)

    def create_committer(self) -> FileCommitter:
        """Driver side, once per commit."""
        return FileCommitter(part_files=self.part_files(), store=self.state_store(), format_config=self.config.format,
                             rolling_policy=self.config.rolling_policy, compaction=self.config.compaction,
                             plan_name=self.plan_name, csv_header=self.csv_header, spark_log=self.spark_log(),
                             existing_files=lambda: FinishedFileManifest(self.storage()).finished_files())

    def discard(self, committables: list[Committable]) -> None:
        """Driver side: a failed batch or the replay of a committed one. New files are removed,
        carried files stay as their last commit recorded them."""
        part_files = self.part_files()
        for committable in committables:
            part_files.abort(PartFile.from_json(committable))

    def abort_job(self, job_id: str, committables: list[Committable]) -> None:
        """Driver side, once per failed ``df.write``: remove every file of the job (its writer
        uids start with a digest of the job id), those of tasks that failed mid-write included."""
        self.discard(committables)
        self.part_files().sweep(ours=job_part_file(self.config.output.part_prefix, job_id), keep=())

    def post_commit(self, batch_id: int | None, committables: list[Committable]) -> None:
        """Driver side, after each commit (idempotent): remove what failed attempts left, fold
        old state files into the manifest (expiring files past ``fileRetention``) and forget them."""
        if batch_id is None:
            return
        store = self.state_store()
        state = store.get(batch_id) or store.latest_before(batch_id)
        self.sweep_after(state)
        manifest = self.manifest()
        if manifest.fold_due(batch_id):
            manifest.fold_before(batch_id - STATE_RETENTION, now=time.time())  # before the states go
            store.purge_before(batch_id - STATE_RETENTION)

    def sweep_after(self, state: SinkState) -> list[str]:
        """Driver side, after a commit or by ``sparklink.files.finish`` under the output's lease:
        remove every streaming part file (and what was stored for one) that ``state`` (the last
        committed) does not name, and what attempts stored for the files it finished. Never
        inside a micro-batch's commit, whose tasks' files are not named yet. Returns the keys."""
        part_files = self.part_files()
        return part_files.sweep(ours=stream_part_file(self.config.output.part_prefix),
                                keep=state.in_progress + state.held) + part_files.sweep_finished(finished_parts(state))


def _arrow_schema(schema: StructType) -> pa.Schema:
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(schema, timezone="UTC")
