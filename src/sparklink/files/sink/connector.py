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

Layout under ``path`` (DESIGN.md section 4)::

    _sparklink/commits/<batchId>.json     the SDK commit log
    _sparklink/state/<batchId>.json       the committed state of the file sink
    _sparklink/owner.json                 the streaming query that owns the output
    _sparklink/lease.json (+ lease.lock)  the running query's lease, renewed every micro-batch
    _sparklink/sink.json                  the sink's options and schema (for sparklink.files.finish)
    _sparklink/manifest/compact.json      the live finished files of older batches
    _spark_metadata/<n>[.compact]         Spark's file sink log (sparkMetadata, default true)
    <bucket>/.part-<uid>-<n><suffix>.inprogress.<tag>   in-progress / pending (hidden)
    <bucket>/part-<uid>-<n><suffix>                     finished

On S3 (``s3://bucket/prefix`` or ``s3a://``) the metadata objects are the same, written with
conditional requests through the storage seam, and a part file is a multipart upload at its
finished key (:mod:`sparklink.files.sink.s3_parts`), invisible until the commit completes it.
A carried file keeps its upload across micro-batches, its tail (under 5 MiB) in a hidden tail
object. With compaction, uploads are staged at the hidden names (compaction reads them before
they finish). Spark's ``_spark_metadata`` log (on by default), ``fileRetention`` and the lease
(``leaseTimeout``) are the same objects on S3, written through the storage seam.
"""

from __future__ import annotations

import base64
import dataclasses
import logging
import os
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
from pyspark.sql.types import StructType

from sparklink.errors import ConfigError, MetadataError
from sparklink.files.sink.bucket_assigners import (ASSIGNER_BASEPATH, ASSIGNER_COLUMN, ASSIGNER_CUSTOM,
                                                   ASSIGNER_DATETIME, ASSIGNERS, DEFAULT_BUCKET_FORMAT,
                                                   DEFAULT_TIMEZONE, OPTION_BUCKET_ASSIGNER, OPTION_BUCKET_COLUMN,
                                                   OPTION_BUCKET_FORMAT, OPTION_BUCKET_HIVE_STYLE,
                                                   OPTION_BUCKET_TIMEZONE, BasePathBucketAssigner, BucketAssigner,
                                                   CallableBucketAssigner, ColumnBucketAssigner,
                                                   DateTimeBucketAssigner, refuse_unreadable_layout)
from sparklink.files.sink.bucket_writer import FileSinkWriter
from sparklink.files.sink.committer import FileCommitter
from sparklink.files.sink.consistency import (REBUILD_STATE, REBUILT_KEY, REWRITE_ENTRY_FINISHED,
                                              REWRITE_ENTRY_FROM_STATE, MetadataScan)
from sparklink.files.sink.compaction import OPTION_EVERY_N_CHECKPOINTS, OPTION_SIZE_THRESHOLD, FileCompactStrategy
from sparklink.files.sink.recovery import FINISH_INTENT, record_sink, resume_finish
from sparklink.files.sink.formats import (OPTION_COMPRESSION, OPTION_FORMAT, OPTION_HEADER, OPTION_ROW_GROUP_SIZE,
                                          OPTION_WRITE_BUFFER_SIZE, BULK_FORMATS, DEFAULT_WRITE_BUFFER_SIZE, FORMATS,
                                          FormatConfig, parse_row_group_size)
from sparklink.files.sink.manifest import (META_DIR, OPTION_FILE_RETENTION, STATE_RETENTION, FinishedFileManifest,
                                           file_retention)
from sparklink.files.sink.output_schema import OPTION_MERGE_SCHEMA, check_output_schema
from sparklink.files.sink.output_file_config import OPTION_PART_PREFIX, OPTION_PART_SUFFIX, OutputFileConfig
from sparklink.files.sink.part_files import (COMPACTION_TAG, PENDING, PartFile, finished_name, in_progress_name, job_tag, parse_in_progress, relative,
                                             truncate_to, STREAM_TAG_PREFIX)
from sparklink.files.sink.rolling_policies import (OPTION_INACTIVITY_INTERVAL, OPTION_MAX_PART_SIZE,
                                                   OPTION_ROLLING_POLICY, OPTION_ROLLOVER_INTERVAL, POLICIES,
                                                   POLICY_CHECKPOINT, POLICY_DEFAULT, DefaultRollingPolicy,
                                                   OnCheckpointRollingPolicy, RollingPolicy)
from sparklink.files.sink.spark_log import (METADATA_DIR, OPTION_SPARK_METADATA, SPARK_LOG_OPTIONS, SparkLog,
                                            SparkLogConfig, spark_log_config)
from sparklink.files.sink.s3_parts import (BASE_TAIL_KEY, OPTION_S3_PART_SIZE, TAIL_INFIX, UPLOAD_KEY, S3Output,
                                          abort_part, stale_uploads, tail_owner, upload_of)
from sparklink.storage import S3_OPTIONS, S3Location, parse_location
from sparklink.storage.base import FileStorage
from sparklink.storage.directory import StorageDirectory, StorageFile
from sparklink.storage.local import LocalStorage
from sparklink.storage.s3 import S3Storage
from sparklink.files.sink.state import SinkState, StateStore, empty_state, next_state
from sparklink.options import Options, parse_bool, parse_choice, parse_duration, parse_int, parse_size
from sparklink.sink.commit_log import STATE_FINISHED, CommitLog, CommitLogEntry
from sparklink.sink.lease import DEFAULT_LEASE_TIMEOUT, OutputLease
from sparklink.sink.protocol import roll_forward
from sparklink.sink.sink import EndOfInput, RestoreContext, Sink
from sparklink.sink.writer import Committable, WriterContext

OPTION_PATH = "path"
OPTION_CHECKPOINT_LOCATION = "checkpointLocation"
OPTION_BUCKET_ASSIGNER_CALLABLE = "bucketAssignerCallable"
OPTION_LEASE_TIMEOUT = "leaseTimeout"
OPTION_FINISH_AT_END = "finishAtEnd"  # true: a query that ends without a crash finishes its held and carried files
KNOWN_OPTIONS = (OPTION_PATH, OPTION_FORMAT, OPTION_BUCKET_ASSIGNER, OPTION_BUCKET_COLUMN, OPTION_BUCKET_FORMAT,
                 OPTION_BUCKET_TIMEZONE, OPTION_BUCKET_HIVE_STYLE, OPTION_ROLLING_POLICY, OPTION_MAX_PART_SIZE,
                 OPTION_ROLLOVER_INTERVAL, OPTION_INACTIVITY_INTERVAL, OPTION_PART_PREFIX, OPTION_PART_SUFFIX,
                 OPTION_SIZE_THRESHOLD, OPTION_EVERY_N_CHECKPOINTS, OPTION_COMPRESSION, OPTION_ROW_GROUP_SIZE,
                 OPTION_HEADER, OPTION_BUCKET_ASSIGNER_CALLABLE, OPTION_FILE_RETENTION,
                 OPTION_WRITE_BUFFER_SIZE, OPTION_LEASE_TIMEOUT, OPTION_FINISH_AT_END, OPTION_MERGE_SCHEMA) + SPARK_LOG_OPTIONS + S3_OPTIONS + (OPTION_S3_PART_SIZE,)
S3_SINK_OPTIONS = S3_OPTIONS + (OPTION_S3_PART_SIZE,)
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
    s3: S3Output | None = None   # the output is on S3 (``path`` is then its URI)
    finish_at_end: bool = True   # finishAtEnd: the end of input of a query that ends without a crash

    def __post_init__(self) -> None:
        if self.format.bulk and self.rolling_policy.carries_across_batches:
            raise ConfigError(OPTION_ROLLING_POLICY, f"format '{self.format.name}' is a bulk format; its files roll "
                              "at every micro-batch", POLICY_CHECKPOINT)

    @classmethod
    def from_options(cls, options: Mapping[str, str] | None) -> "FileSinkConfig":
        opts = Options(options)
        opts.reject_unknown(KNOWN_OPTIONS, ignore=(OPTION_CHECKPOINT_LOCATION,))
        location = parse_location(OPTION_PATH, opts.require(OPTION_PATH))
        if isinstance(location, S3Location):
            path, s3 = location.uri(), S3Output.from_options(location, opts)
        else:
            path, s3 = location.path, None
            for key in S3_SINK_OPTIONS:
                if key in opts:
                    raise ConfigError(key, f"applies to s3:// and s3a:// paths, not to the local path '{path}'")
        fmt_name = parse_choice(OPTION_FORMAT, opts.get(OPTION_FORMAT, "parquet"), FORMATS)
        compression = opts.get(OPTION_COMPRESSION)
        row_group = opts.get(OPTION_ROW_GROUP_SIZE)
        buffer_size = opts.get(OPTION_WRITE_BUFFER_SIZE)
        header = opts.get(OPTION_HEADER)
        row_group_bytes, row_group_rows = parse_row_group_size(row_group) if row_group is not None else (None, None)
        if buffer_size is not None and fmt_name not in BULK_FORMATS:
            raise ConfigError(OPTION_WRITE_BUFFER_SIZE, f"applies to formats {', '.join(BULK_FORMATS)}, not '{fmt_name}'")
        if header is not None and fmt_name != "csv":
            raise ConfigError(OPTION_HEADER, f"applies to format 'csv', not '{fmt_name}'")
        format_config = FormatConfig(
            name=fmt_name,
            compression=compression.strip().lower() if compression is not None else None,
            row_group_bytes=row_group_bytes, row_group_rows=row_group_rows,
            write_buffer_size=(parse_size(OPTION_WRITE_BUFFER_SIZE, buffer_size) if buffer_size is not None
                               else DEFAULT_WRITE_BUFFER_SIZE),
            header=parse_bool(OPTION_HEADER, header) if header is not None else False,
        )
        compaction = _compaction(opts)
        if s3 is not None and compaction is not None:  # compaction reads pending files: staged at hidden names
            s3 = dataclasses.replace(s3, stage_hidden=True)
        spark_log = spark_log_config(opts, retention=file_retention(opts))
        assigner = _assigner(opts)
        if spark_log is not None:  # Spark's readers skip non-Hive directories silently: refuse such a layout
            assigner = refuse_unreadable_layout(assigner)
        return cls(path=path, format=format_config, assigner=assigner, rolling_policy=_policy(opts, format_config),
                   output=OutputFileConfig(part_prefix=opts.get(OPTION_PART_PREFIX, "part"),
                                           part_suffix=opts.get(OPTION_PART_SUFFIX)),
                   compaction=compaction,
                   spark_log=spark_log,
                   file_retention=file_retention(opts), lease_timeout=_lease_timeout(opts), s3=s3,
                   finish_at_end=parse_bool(OPTION_FINISH_AT_END, opts.get(OPTION_FINISH_AT_END, "true")))


def _assigner(opts: Options) -> BucketAssigner:
    name = parse_choice(OPTION_BUCKET_ASSIGNER, opts.get(OPTION_BUCKET_ASSIGNER, ASSIGNER_DATETIME),
                        ASSIGNERS + (ASSIGNER_CUSTOM,))
    column = opts.get(OPTION_BUCKET_COLUMN)
    for key in (OPTION_BUCKET_FORMAT, OPTION_BUCKET_TIMEZONE):
        if key in opts and name != ASSIGNER_DATETIME:
            raise ConfigError(key, f"applies to bucketAssigner 'datetime', not '{name}'")
    if OPTION_BUCKET_HIVE_STYLE in opts and name != ASSIGNER_COLUMN:
        raise ConfigError(OPTION_BUCKET_HIVE_STYLE, f"applies to bucketAssigner 'column', not '{name}'")
    if OPTION_BUCKET_ASSIGNER_CALLABLE in opts and name != ASSIGNER_CUSTOM:
        raise ConfigError(OPTION_BUCKET_ASSIGNER_CALLABLE, "is set by FileSink.with_bucket_assigner(callable) only")
    if name == ASSIGNER_DATETIME:
        return DateTimeBucketAssigner(format=opts.get(OPTION_BUCKET_FORMAT, DEFAULT_BUCKET_FORMAT),
                                      timezone=opts.get(OPTION_BUCKET_TIMEZONE, DEFAULT_TIMEZONE), column=column)
    if column is not None and name == ASSIGNER_BASEPATH:
        raise ConfigError(OPTION_BUCKET_COLUMN, "does not apply to bucketAssigner 'basepath'", "datetime, column")
    if name == ASSIGNER_BASEPATH:
        return BasePathBucketAssigner()
    if name == ASSIGNER_COLUMN:
        if column is None:
            raise ConfigError(OPTION_BUCKET_COLUMN, "is required with bucketAssigner 'column'")
        hive = parse_bool(OPTION_BUCKET_HIVE_STYLE, opts.get(OPTION_BUCKET_HIVE_STYLE, "true"))
        return ColumnBucketAssigner(column=column, hive_style=hive)
    encoded = opts.get(OPTION_BUCKET_ASSIGNER_CALLABLE)
    if encoded is None:
        raise ConfigError(OPTION_BUCKET_ASSIGNER, "'custom' is set by FileSink.with_bucket_assigner(callable)",
                          ", ".join(ASSIGNERS))
    from pyspark import cloudpickle

    try:
        function = cloudpickle.loads(base64.b64decode(encoded))
    except (ValueError, TypeError, AttributeError, ImportError, EOFError) as exc:
        raise ConfigError(OPTION_BUCKET_ASSIGNER_CALLABLE, f"cannot load the bucket assigner function: {exc}") from None
    if isinstance(function, BucketAssigner):
        return function
    return CallableBucketAssigner(function=function)


def _policy(opts: Options, fmt: FormatConfig) -> RollingPolicy:
    default_name = POLICY_CHECKPOINT if fmt.bulk else POLICY_DEFAULT
    name = parse_choice(OPTION_ROLLING_POLICY, opts.get(OPTION_ROLLING_POLICY, default_name), POLICIES)
    size = parse_size(OPTION_MAX_PART_SIZE, opts[OPTION_MAX_PART_SIZE]) if OPTION_MAX_PART_SIZE in opts else None
    rollover = parse_duration(OPTION_ROLLOVER_INTERVAL, opts[OPTION_ROLLOVER_INTERVAL]) \
        if OPTION_ROLLOVER_INTERVAL in opts else None
    inactivity = parse_duration(OPTION_INACTIVITY_INTERVAL, opts[OPTION_INACTIVITY_INTERVAL]) \
        if OPTION_INACTIVITY_INTERVAL in opts else None
    if name == POLICY_CHECKPOINT:
        # inactivityInterval is accepted (DESIGN.md's example sets it with 'checkpoint'); a file
        # rolled on checkpoint is written by one task and closed with its micro-batch, so it is
        # never inactive longer than a task runs.
        return OnCheckpointRollingPolicy(max_part_size=size, rollover_interval=rollover, inactivity_interval=inactivity)
    if fmt.bulk:
        raise ConfigError(OPTION_ROLLING_POLICY, f"'default' carries files across micro-batches, which bulk format "
                          f"'{fmt.name}' cannot do", POLICY_CHECKPOINT)
    policy = DefaultRollingPolicy()
    if size is not None:
        policy = policy.with_max_part_size(size)
    if rollover is not None:
        policy = policy.with_rollover_interval(rollover)
    if inactivity is not None:
        policy = policy.with_inactivity_interval(inactivity)
    return policy


def _lease_timeout(opts: Options) -> float:
    value = opts.get(OPTION_LEASE_TIMEOUT)
    if value is None:
        return DEFAULT_LEASE_TIMEOUT
    timeout = parse_duration(OPTION_LEASE_TIMEOUT, value)
    if timeout <= 0:
        raise ConfigError(OPTION_LEASE_TIMEOUT, f"must be longer than 0, got '{value}'", "e.g. 10min")
    return timeout


def _compaction(opts: Options) -> FileCompactStrategy | None:
    size = opts.get(OPTION_SIZE_THRESHOLD)
    every = opts.get(OPTION_EVERY_N_CHECKPOINTS)
    if size is None and every is None:
        return None
    return FileCompactStrategy(
        size_threshold=parse_size(OPTION_SIZE_THRESHOLD, size) if size is not None else None,
        every_n_checkpoints=parse_int(OPTION_EVERY_N_CHECKPOINTS, every, minimum=1) if every is not None else None)


class FileSinkConnector(Sink):
    """The file sink (driver: validation, committed state, committer, hooks; executors: writers)."""

    def __init__(self, options: Mapping[str, str] | None, schema: StructType):
        super().__init__(options, schema)
        self.config = FileSinkConfig.from_options(options)
        self.s3 = self.config.s3
        self.root = Path(self.config.path).absolute() if self.s3 is None else None  # None on S3
        self._storage: S3Storage | None = None  # the driver's S3 client (never pickled)
        self.arrow_schema = _arrow_schema(schema)
        self.config.format.validate(self.arrow_schema)
        self.config.assigner.validate(self.arrow_schema)
        self.csv_header = (self.config.format.row_encoder(self.arrow_schema).header()
                           if self.config.format.name == "csv" else b"")
        self.carried: list[PartFile] = []
        if self.config.spark_log is None and SparkLog(self._output_storage()).exists():
            raise ConfigError(OPTION_SPARK_METADATA, f"is false, but {self._output_storage().uri(METADATA_DIR)} exists: "
                              "Spark's readers would not see the files written from now on. Keep it true, or delete "
                              "that directory (Spark then lists the directory)")
        # a schema other than the recorded one is refused (output_schema.py), on every store
        check_output_schema(self.meta_directory(), schema, output=self.config.path,
                            merge_schema=parse_bool(OPTION_MERGE_SCHEMA, Options(options).get(OPTION_MERGE_SCHEMA, "false")))
        record_sink(self.meta_directory(), self.options, schema.json())
        self.streaming = Options(options).get(OPTION_CHECKPOINT_LOCATION) is not None

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_storage"] = None  # a live client never travels to the executors
        return state

    # ------------------------------------------------------------------ locations

    def storage(self) -> S3Storage:
        """The S3 output's storage (driver side; one client per sink object)."""
        assert self.s3 is not None
        if self._storage is None:
            self._storage = self.s3.storage()
        return self._storage

    def _output_storage(self) -> FileStorage:
        """The output's storage (driver side): the S3 client, or the local directory."""
        return self.storage() if self.s3 is not None else LocalStorage(self.root)

    @property
    def seals_carried_in_place(self) -> bool:
        """Whether finishing a carried file fixes its content where it is (S3: completing its
        upload with the recorded parts), so ``sparklink.files.finish`` need not copy it."""
        return self.s3 is not None

    def meta_directory(self) -> StorageDirectory:
        """The output's ``_sparklink`` directory on its storage (driver side)."""
        return StorageDirectory(self._output_storage(), META_DIR)

    def _meta(self, name: str) -> Path | StorageDirectory:
        if self.s3 is not None:
            return StorageDirectory(self.storage(), f"{META_DIR}/{name}")
        return self.root / META_DIR / name

    def commit_log_dir(self) -> Path | StorageDirectory:
        return self._meta("commits")

    def owner_lock_path(self) -> Path | StorageFile:
        if self.s3 is not None:
            return StorageFile(StorageDirectory(self.storage(), META_DIR), "owner.json")
        return self.root / META_DIR / "owner.json"

    def lease(self) -> OutputLease | None:
        """``_sparklink/lease.json``: renewed by every micro-batch, checked by ``sparklink.files.finish``
        (local disk and S3, through the storage seam)."""
        return OutputLease(directory=StorageDirectory(self._output_storage(), META_DIR),
                           timeout=self.config.lease_timeout, output=self.config.path)

    def end_of_input(self) -> EndOfInput | None:
        """``sparklink.files.finish`` of this output when its query ends without a crash (held
        compaction inputs and carried files made visible), on local disk and S3.
        ``finishAtEnd=false``: none (carried files stay open for the next run)."""
        if not self.config.finish_at_end:
            return None
        return EndOfInput(kind="files.finish", target=str(self.root) if self.s3 is None else self.config.path)

    def state_store(self) -> StateStore:
        return StateStore(self._meta("state"))

    def spark_log(self) -> SparkLog | None:
        return SparkLog(self._output_storage(), self.config.spark_log) if self.config.spark_log is not None else None

    def manifest(self) -> FinishedFileManifest:
        spark_log = self.spark_log()
        if self.s3 is not None:
            return FinishedFileManifest(self.config.path, storage=self.storage(), retention=self.config.file_retention,
                                        spark_log=spark_log,
                                        cleanup_delay=spark_log.config.cleanup_delay if spark_log else 0.0)
        return FinishedFileManifest(self.root, retention=self.config.file_retention, spark_log=spark_log,
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
        """Once per query run: check the commit log and the states against each other, rebuild
        what can be rebuilt exactly (logged as a warning), refuse the start otherwise; then roll
        an unfinished commit forward and complete an interrupted ``sparklink.files.finish``."""
        if self.s3 is not None:
            self.storage().check_conditional_writes()
        self._repair_metadata()
        roll_forward(self, CommitLog(self.commit_log_dir()))
        resume_finish(self)
        if self.s3 is not None:  # tails of carried files the last commit finished, if its sweep was cut short
            self._sweep_finished_tails(self.state_store().latest_before(None))

    def _repair_metadata(self) -> None:
        scan = (MetadataScan.read(self.root) if self.s3 is None
                else MetadataScan.read(self.config.path, storage=self.storage()))
        base_required = self.config.rolling_policy.carries_across_batches or self.config.compaction is not None
        findings = scan.findings(base_required=base_required)
        refused = [f for f in findings if not f.repairable]
        if refused:
            raise MetadataError(f"file sink output {self.config.path} cannot be restored: "
                                + " | ".join(str(f) for f in refused))
        latest = scan.latest()
        log, store, committer = CommitLog(self.commit_log_dir()), self.state_store(), self.create_committer()
        for finding in findings:
            LOG.warning("file sink %s: recovering from damaged metadata: %s", self.config.path, finding)
            batch = finding.batch_id
            assert batch is not None  # only the owner claim has none, and it is refused
            if finding.action == REBUILD_STATE:
                entry = scan.entries[batch]
                state = self._rebuild_state(scan.states.get(batch - 1), entry, last=batch == latest)
                store.put(state)
                scan.states[batch] = state
                if batch == latest and entry.finished:
                    committer.apply(state)
            elif finding.action == REWRITE_ENTRY_FROM_STATE:
                state = scan.states[batch]
                if batch == latest:
                    committer.apply(state)
                log.put(CommitLogEntry(key=CommitLog.key_for_batch(batch), batch_id=batch, state=STATE_FINISHED,
                                       committables=[], created_at=state.committed_at, finished_at=time.time(),
                                       extra={REBUILT_KEY: f"from state/{store.path_of(batch).rpartition('/')[2]}; the entry's "
                                                           "list of files is not known"}))
            elif finding.action == REWRITE_ENTRY_FINISHED:
                log.put(CommitLogEntry(key=CommitLog.key_for_batch(batch), batch_id=batch, state=STATE_FINISHED,
                                       committables=[], finished_at=time.time(),
                                       extra={REBUILT_KEY: "the entry was damaged; its list of files is lost"}))

    def _rebuild_state(self, previous: SinkState | None, entry: CommitLogEntry, *, last: bool) -> SinkState:
        """State N again from state N-1 and entry N's part files. Time-based rolls are decided at
        the entry's finish time (at or after the original decision, so a superset of its rolls);
        for the last batch, a carried file the original commit did finish is taken as finished."""
        batch = entry.batch_id
        assert batch is not None
        parts = [PartFile.from_json(c) for c in entry.committables]
        state = next_state(previous or empty_state(), batch, parts, now=entry.finished_at or entry.created_at,
                           rolling_policy=self.config.rolling_policy, compaction=self.config.compaction,
                           plan_name=lambda bucket, index: self._plan_name(bucket, batch, index))
        if last:
            for part in list(state.in_progress):
                if self._finished_outside_state(part):
                    state.in_progress.remove(part)
                    part.state = PENDING
                    state.finish.append(part)
        return state

    def _finished_outside_state(self, part: PartFile) -> bool:
        """Whether a carried file the rebuilt state names was finished by the original commit."""
        if self.s3 is not None:
            return self.storage().info(part.final) is not None  # completed: the object exists
        return not (self.root / part.path).exists() and (self.root / part.final).exists()

    def prepare_tasks(self) -> None:
        """Every micro-batch: the carried in-progress files of the last commit, for the tasks."""
        if self.streaming:
            self.carried = self.state_store().latest_before(None).in_progress

    # ------------------------------------------------------------------ executors

    def create_writer(self, context: WriterContext) -> FileSinkWriter:
        """Executor side, once per task."""
        carry = context.streaming and self.config.rolling_policy.carries_across_batches
        carried = {f.bucket: f for f in self.carried if f.partition == context.partition_id} if carry else {}
        return FileSinkWriter(root=self.root, context=context, format_config=self.config.format,
                              assigner=self.config.assigner, rolling_policy=self.config.rolling_policy,
                              output_config=self.config.output, carried=carried, carry=carry, s3=self.s3)

    # ------------------------------------------------------------------ driver hooks

    def _plan_name(self, bucket: str, batch_id: int, index: int) -> tuple[str, str]:
        final = finished_name(self.config.output.part_prefix, f"c{batch_id:08d}", index,
                              self.config.output.suffix_for(self.config.format.extension))
        return relative(bucket, in_progress_name(final, COMPACTION_TAG)), relative(bucket, final)

    def create_committer(self) -> FileCommitter:
        """Driver side, once per commit."""
        if self.s3 is not None:
            return FileCommitter(root=None, store=self.state_store(), format_config=self.config.format,
                                 rolling_policy=self.config.rolling_policy, compaction=self.config.compaction,
                                 plan_name=self._plan_name, csv_header=self.csv_header, storage=self.storage(),
                                 s3_part_size=self.s3.part_size, spark_log=self.spark_log(),
                                 existing_files=lambda: FinishedFileManifest(
                                     self.config.path, storage=self.storage()).finished_files())
        return FileCommitter(root=self.root, store=self.state_store(), format_config=self.config.format,
                             rolling_policy=self.config.rolling_policy, compaction=self.config.compaction,
                             plan_name=self._plan_name, csv_header=self.csv_header, spark_log=self.spark_log(),
                             existing_files=lambda: FinishedFileManifest(self.root).finished_files())

    def discard(self, committables: list[Committable]) -> None:
        """Driver side: a failed batch or the replay of a committed one. New files are deleted,
        carried files appended to in place are cut back to their committed length (S3: the
        uploads are aborted)."""
        if self.s3 is not None:
            for committable in committables:
                abort_part(self.storage(), PartFile.from_json(committable))
            return
        for committable in committables:
            part = PartFile.from_json(committable)
            if part.in_place:
                truncate_to(self.root / part.path, part.base_length)
            else:
                (self.root / part.path).unlink(missing_ok=True)

    def abort_job(self, job_id: str, committables: list[Committable]) -> None:
        """Driver side, once per failed ``df.write``: remove every hidden file of the job (its
        tag is ``j<jobId>``), those of tasks that failed mid-write included."""
        self.discard(committables)
        if self.s3 is not None:
            for upload in stale_uploads(self.storage(), part_prefix=self.config.output.part_prefix, keep=set(),
                                        job_id=job_id):
                self.storage().abort_upload(upload.key, upload.upload_id)
            return
        tag = job_tag(job_id)
        for path, _, file_tag in self._hidden_part_files():
            if file_tag == tag:
                path.unlink(missing_ok=True)

    def post_commit(self, batch_id: int | None, committables: list[Committable]) -> None:
        """Driver side, after each commit (idempotent): remove orphans of failed attempts,
        fold old state files into the manifest (expiring files past ``fileRetention``) and forget them."""
        if batch_id is None:
            return
        store = self.state_store()
        state = store.get(batch_id) or store.latest_before(batch_id)
        if self.s3 is not None:
            self.abort_stale_uploads(state)
        else:
            self.remove_orphans(state.referenced())
        manifest = self.manifest()
        if manifest.fold_due(batch_id):
            manifest.fold_before(batch_id - STATE_RETENTION, now=time.time())  # before the states go
            store.purge_before(batch_id - STATE_RETENTION)

    def abort_stale_uploads(self, state: SinkState) -> list[str]:
        """S3: abort every pending upload of a streaming writer that ``state`` does not name
        (ListMultipartUploads under the output prefix, to the end), and delete the tail objects
        of its carried files that it does not name. Returns the aborted uploads' keys."""
        keep = {upload_of(part).upload_id for part in state.in_progress + state.held}
        aborted = []
        for upload in stale_uploads(self.storage(), part_prefix=self.config.output.part_prefix, keep=keep):
            self.storage().abort_upload(upload.key, upload.upload_id)
            aborted.append(upload.key)
            self._delete_tails_of_upload(upload.key)
        for part in state.in_progress:  # tails of attempts that died, and of replays: one LIST per carried file
            kept = upload_of(part).tail_key
            for stale in self.storage().list(f"{part.path}{TAIL_INFIX}"):
                if stale.key != kept:
                    self.storage().delete(stale.key)
        self._sweep_finished_tails(state)  # and every tail of the carried files this commit finished
        return aborted

    def sweep_after(self, state: SinkState) -> None:
        """Driver side, by ``sparklink.files.finish`` under the output's lease (no query writes
        the output, so no task's upload is pending): on S3, abort the uploads and delete the tail
        objects ``state`` (the last committed) does not name (:meth:`abort_stale_uploads`); never
        inside a micro-batch's commit, whose tasks' uploads are not named yet. Nothing on local disk (a micro-batch's commit removes
        its orphans; a finish's compaction rewrites its temporary file on a replay)."""
        if self.s3 is not None:
            self.abort_stale_uploads(state)

    def _delete_tails_of_upload(self, key: str) -> None:
        """S3: delete the tail objects of the part file whose stale upload at ``key`` was just
        aborted (an attempt no commit named persisted it as carried). Its upload's name is its
        own (a new file of that attempt), so every tail under its hidden names is its (one LIST)."""
        directory, _, name = key.rpartition("/")
        hidden = name if parse_in_progress(name) is not None else in_progress_name(name, "")
        prefix = f"{directory}/{hidden}" if directory else hidden
        for stale in self.storage().list(prefix):
            if tail_owner(stale.key.rpartition("/")[2]) is not None:
                self.storage().delete(stale.key)

    def _sweep_finished_tails(self, state: SinkState) -> list[str]:
        """S3: delete every tail object of a carried file ``state`` finished (completed, or
        compacted) -- the recorded one is deleted by the commit itself, this removes those of
        attempts no commit named (one LIST per such file). Returns the deleted keys."""
        deleted = []
        finished = state.finish + [part for plan in state.compactions for part in plan.inputs]
        for part in finished:
            if part.extra.get(UPLOAD_KEY) is None or (upload_of(part).tail_key is None
                                                      and part.extra.get(BASE_TAIL_KEY) is None):
                continue  # never carried: no tail object was ever written for it
            for stale in self.storage().list(f"{part.path}{TAIL_INFIX}"):
                self.storage().delete(stale.key)
                deleted.append(stale.key)
        return deleted

    def _hidden_part_files(self) -> Iterator[tuple[Path, str, str]]:
        """``(path, path relative to the root, tag)`` of every hidden part file (driver side)."""
        for directory, subdirs, files in os.walk(self.root):
            if directory == str(self.root):
                subdirs[:] = [d for d in subdirs if d not in (META_DIR, METADATA_DIR)]
            for name in files:
                parsed = parse_in_progress(name)
                if parsed is not None:
                    path = Path(directory, name)
                    yield path, os.path.relpath(path, self.root), parsed[1]

    def remove_orphans(self, referenced: set[str]) -> list[str]:
        """Delete hidden part files of streaming attempts that no committed state references."""
        removed = []
        for path, rel, tag in self._hidden_part_files():
            if tag.startswith(STREAM_TAG_PREFIX) and rel not in referenced:
                path.unlink(missing_ok=True)
                removed.append(rel)
        return removed


def _arrow_schema(schema: StructType) -> pa.Schema:
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(schema, timezone="UTC")
