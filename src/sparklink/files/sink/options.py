"""The file sink's options: one table of specs (keys, parsers, defaults, where each applies, docs).

Read on the driver when a query starts (:meth:`~sparklink.files.sink.connector.FileSinkConfig.from_options`);
the builders (:mod:`sparklink.files.sink.builder`) compile to these keys, and the option table in
docs/file-sink.md is generated from here (:mod:`sparklink.options_doc`). The values some options
name (bucket assigners, rolling policies) are defined here too, beside the options that take them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sparklink.errors import ConfigError
from sparklink.files.spark_log import SparkLogOptions
from sparklink.formats.options import FormatWriteOptions
from sparklink.options import (
    BOOL,
    DURATION,
    SIZE,
    Applies,
    Option,
    Options,
    SparkOptions,
    applies_to_option,
    choice,
    custom,
    integer,
    parse_duration,
    string,
)
from sparklink.sink.changelog import WRITE_MODE_APPEND, refuse_upsert
from sparklink.sink.lease import DEFAULT_LEASE_TIMEOUT
from sparklink.sink.txn import TxnOptions
from sparklink.storage.output import S3OutputOptions

ASSIGNER_DATETIME = "datetime"
ASSIGNER_BASEPATH = "basepath"
ASSIGNER_COLUMN = "column"
ASSIGNER_CUSTOM = "custom"
ASSIGNERS = (ASSIGNER_DATETIME, ASSIGNER_BASEPATH, ASSIGNER_COLUMN)
DEFAULT_BUCKET_FORMAT = "'dt='yyyy-MM-dd/'hour='HH"  # Hive-style: Spark's readers derive dt and hour
DEFAULT_TIMEZONE = "UTC"
POLICY_CHECKPOINT = "checkpoint"
POLICY_DEFAULT = "default"
POLICIES = (POLICY_CHECKPOINT, POLICY_DEFAULT)
DEFAULT_PART_PREFIX = "part"


def _lease_timeout(option: str, value: str) -> float:
    timeout = parse_duration(option, value)
    if timeout <= 0:
        raise ConfigError(option, f"must be longer than 0, got '{value}'", "e.g. 10min")
    return timeout


_ASSIGNER = "bucketAssigner"
_DATETIME = applies_to_option(_ASSIGNER, ASSIGNER_DATETIME, doc="`bucketAssigner` `datetime`")


class FileSinkOptions(S3OutputOptions, TxnOptions):
    """``sparklink.files`` as a sink (streams and ``df.write``)."""

    @classmethod
    def options(cls, raw: Mapping[str, Any] | Options | None) -> Options:
        """As the base, and ``writeMode=upsert`` refused first, naming the sinks that serve it
        (files only append: :func:`sparklink.sink.changelog.refuse_upsert`)."""
        options = raw if isinstance(raw, Options) else Options(raw)
        refuse_upsert(options, "sparklink.files")
        return super().options(options)

    write_mode = Option("writeMode", choice(WRITE_MODE_APPEND), default=WRITE_MODE_APPEND,
                        doc="only `append`: upserts and deletes by key go to the table formats "
                            "(see [changelogs](changelogs.md))")

    path = Option("path", string("base directory, or `s3://bucket/prefix` / `s3a://...`"), required=True,
                  example="/data/events", builder="FileSink.for_row_format / for_bulk_format(base_path)",
                  doc="where the output lives (see [object stores](object-stores.md) for S3)")
    format = FormatWriteOptions.format
    bucket_assigner = Option(_ASSIGNER, choice(*ASSIGNERS, ASSIGNER_CUSTOM), default=ASSIGNER_DATETIME,
                             example="column", builder="with_bucket_assigner(assigner)",
                             doc="how rows are put into bucket directories (`custom`: set by the builder with a "
                                 "function)")
    bucket_column = Option("bucketColumn", string("a column"), example="event_time",
                           applies=Applies(_ASSIGNER, (ASSIGNER_DATETIME, ASSIGNER_COLUMN, ASSIGNER_CUSTOM),
                                           "does not apply to bucketAssigner '{actual}'",
                                           "`bucketAssigner` `datetime`, `column`",
                                           accepted=f"{ASSIGNER_DATETIME}, {ASSIGNER_COLUMN}"),
                           builder="DateTimeBucketAssigner(column=) / ColumnBucketAssigner(column=)",
                           doc="for `datetime`: the event-time column (timestamp, date or epoch milliseconds); "
                               "without it, the batch's processing time. For `column`: the column to bucket by")
    bucket_format = Option("bucketFormat", string("a Java `DateTimeFormatter` pattern"), default=DEFAULT_BUCKET_FORMAT,
                           applies=_DATETIME, example="'date='yyyy-MM-dd", builder="DateTimeBucketAssigner(format=)",
                           doc="the bucket directory of a time (Hive-style by default: Spark derives `dt` and "
                               "`hour`). Supported fields: `yyyy yy MM MMM dd HH mm ss DDD EEE ww` and "
                               "`'quoted text'`. While `sparkMetadata` is on, every segment must be `key=value` "
                               "(see [Buckets](#buckets))")
    bucket_timezone = Option("bucketTimezone", string("IANA zone or offset"), default=DEFAULT_TIMEZONE,
                             applies=_DATETIME, example="Europe/Paris", builder="DateTimeBucketAssigner(timezone=)",
                             doc="the zone bucket times are written in")
    bucket_hive_style = Option("bucketHiveStyle", BOOL, default=True, example="false",
                               applies=applies_to_option(_ASSIGNER, ASSIGNER_COLUMN, doc="`bucketAssigner` `column`"),
                               builder="ColumnBucketAssigner(hive_style=)",
                               doc="directory `col=value`, or the bare `value` (`false`, only with "
                                   "`sparkMetadata=false`)")
    bucket_assigner_callable = Option("bucketAssignerCallable", string("set by the builder"),
                                      applies=Applies(_ASSIGNER, (ASSIGNER_CUSTOM,), "is set by "
                                                      "FileSink.with_bucket_assigner(callable) only",
                                                      "`bucketAssigner` `custom`"),
                                      builder="with_bucket_assigner(callable)",
                                      doc="the pickled function of a `custom` assigner")
    rolling_policy = Option("rollingPolicy", choice(*POLICIES), example="default",
                            default_doc="`checkpoint` for bulk formats, `default` for row formats",
                            builder="with_rolling_policy(policy)",
                            doc="when part files roll: at every micro-batch (`checkpoint`), or by size and time, "
                                "carried across micro-batches (`default`, row formats only)")
    max_part_size = Option("maxPartSize", SIZE, default_doc="`default`: 128MB; `checkpoint`: no limit",
                           example="128MB", builder="DefaultRollingPolicy.builder().with_max_part_size(n)",
                           doc="a part file rolls once it reaches this size")
    rollover_interval = Option("rolloverInterval", DURATION, default_doc="`default`: 60s; `checkpoint`: no limit",
                               example="15min", builder="...with_rollover_interval(t)",
                               doc="a part file rolls once it has been open this long")
    inactivity_interval = Option("inactivityInterval", DURATION, default_doc="`default`: 60s", example="5min",
                                 builder="...with_inactivity_interval(t)",
                                 doc="a part file rolls once it got no row for this long. With `checkpoint` it is "
                                     "accepted but never reached: such a file closes with its micro-batch")
    part_prefix = Option("partPrefix", string("a file name prefix"), default=DEFAULT_PART_PREFIX, example="events",
                         builder="with_output_file_config(OutputFileConfig(part_prefix=))",
                         doc="the finished files' name prefix")
    part_suffix = Option("partSuffix", string("a file name suffix"), example=".jsonl",
                         default_doc="the format's extension: `.parquet`, `.json`, `.csv`, `.txt`, `.avro`, `.orc`",
                         builder="with_output_file_config(OutputFileConfig(part_suffix=))",
                         doc="the finished files' name suffix")
    compression = FormatWriteOptions.compression
    row_group_size = FormatWriteOptions.row_group_size
    write_buffer_size = FormatWriteOptions.write_buffer_size
    header = FormatWriteOptions.header
    compaction_size_threshold = Option("compaction.sizeThreshold", SIZE, example="64MB",
                                       builder="enable_compaction(FileCompactStrategy(size_threshold=))",
                                       doc="compact a bucket's held files once they total this size")
    compaction_every_n_checkpoints = Option("compaction.everyNCheckpoints", integer(1), example="5",
                                            builder="enable_compaction(FileCompactStrategy(every_n_checkpoints=))",
                                            doc="compact a bucket's held files after this many micro-batches")
    spark_metadata = SparkLogOptions.spark_metadata
    file_retention = Option("fileRetention", DURATION, default_doc="none: kept forever", example="7d",
                            doc="files committed longer ago leave both logs and are then deleted")
    finish_at_end = Option("finishAtEnd", BOOL, default=True, example="false",
                           doc="when the query ends without a crash (`availableNow` done, `query.stop()`), finish "
                               "its held and carried files so that everything committed is visible; `false` keeps "
                               "carried files open for the next run (see [End of input](#end-of-input))")
    lease_timeout = Option("leaseTimeout", custom(_lease_timeout, "duration"), default=DEFAULT_LEASE_TIMEOUT,
                           default_doc="`10min`", example="30min",
                           doc="how long a running query's lease on the output lasts after its last micro-batch: "
                               "`sparklink.files.finish` waits it out when the query's driver may still be alive. "
                               "Keep it longer than your longest micro-batch")
    merge_schema = Option("mergeSchema", BOOL, default=False, example="true",
                          doc="accept a query whose schema adds nullable columns to the output's recorded schema; "
                              "see [The output's schema](#the-outputs-schema)")
    log_compact_interval = SparkLogOptions.log_compact_interval
    log_cleanup_delay = SparkLogOptions.log_cleanup_delay
    log_deletion = SparkLogOptions.log_deletion
    checkpoint_location = SparkOptions.checkpoint_location.documented(
        "the query's checkpoint (Spark's); a `df.write` has none")


O = FileSinkOptions
SPARK_LOG_OPTIONS = (O.spark_metadata.key, O.log_compact_interval.key, O.log_cleanup_delay.key, O.log_deletion.key)
