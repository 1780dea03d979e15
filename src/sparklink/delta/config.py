"""The Delta sink's options (validated on the driver, carried to executors in the pickled sink)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from sparklink.delta.table_location import DeltaTableOptions, TableLocation
from sparklink.errors import ConfigError
from sparklink.options import BOOL, SIZE, Applies, Option, SparkOptions, integer, string
from sparklink.sink.changelog import Changelog, ChangelogOptions
from sparklink.sink.txn import TxnOptions  # the SDK's keys; Delta records them itself

DEFAULT_TARGET_FILE_SIZE = 128 * 1024 * 1024


class DeltaSinkOptions(DeltaTableOptions, ChangelogOptions, TxnOptions):
    """``sparklink.delta`` as a sink."""

    checkpoint_location = SparkOptions.checkpoint_location.documented(
        "Spark's checkpoint; the stream's Delta application id is kept in it (`sparklink/delta-app.json`)",
        default_doc="required for streams")
    partition_columns = Option("partitionColumns", string("comma-separated input columns"),
                               default_doc="an existing table's; none for a new table",
                               doc="the columns a new table is partitioned by; must equal an existing table's "
                                   "partition columns when given (Spark refuses `.partitionBy(...)` for Python data "
                                   "sources)")
    merge_schema = Option("mergeSchema", BOOL, default=False,
                          doc="add the input's columns the table lacks (in a version of their own, before the "
                              "data's); without it such an input is refused, naming the columns")
    target_file_size = Option("targetFileSize", SIZE, default=DEFAULT_TARGET_FILE_SIZE, default_doc="`128MB`",
                              doc="a data file is closed once it reaches this size and another is opened (per task "
                                  "and partition value)")
    user_metadata = Option("userMetadata", string("text"),
                           doc="recorded in each commit's `commitInfo.userMetadata` (what `DESCRIBE HISTORY` shows)")
    compaction_every = Option("compaction.everyNCheckpoints", integer(1), default_doc="off",
                              applies=Applies("mode", ("stream",), "applies to streams (every N micro-batches); "
                                              "compact a table written by df.write with delta-rs's "
                                              "optimize.compact()", "streams"),
                              doc="after every N-th micro-batch, the table's small files are rewritten (see "
                                  "[Compaction](#compaction))")
    compaction_target = Option("compaction.targetFileSize", SIZE, default_doc="`targetFileSize`",
                               applies=Applies("compaction.everyNCheckpoints", ("set",), "applies only together "
                                               "with compaction.everyNCheckpoints", "`compaction.everyNCheckpoints`"),
                               doc="files smaller than this are compacted into files of about this size")
    replace_where = Option("replaceWhere", string("a SQL predicate over the table's columns"),
                           applies=Applies("mode", ("write",), "applies to df.write with mode(\"overwrite\"), not to "
                                           "df.writeStream", "`df.write` `overwrite`"),
                           doc="with `mode(\"overwrite\")`: replace only the rows matching the predicate (every "
                               "written row must match it), as Delta's `replaceWhere`; one table version")


O = DeltaSinkOptions


@dataclass(frozen=True, kw_only=True)
class CompactionConfig:
    """``compaction.*``: after every ``every``-th micro-batch of a stream, files smaller than
    ``target_file_size`` are rewritten into files of about that size (a ``dataChange=false``
    commit, delta-rs's OPTIMIZE compaction)."""

    every: int
    target_file_size: int


@dataclass(frozen=True, kw_only=True)
class DeltaSinkConfig:
    """What the options say. ``table`` is where the table lives (local or S3, with its settings)."""

    table: TableLocation
    partition_columns: tuple[str, ...] = ()
    partition_columns_given: bool = False  # absent: an existing table's partition columns
    merge_schema: bool = False
    txn_app_id: str | None = None
    txn_version: int | None = None
    target_file_size: int = DEFAULT_TARGET_FILE_SIZE
    user_metadata: str | None = None
    checkpoint: Path | None = None
    compaction: CompactionConfig | None = None
    changelog: Changelog | None = None  # writeMode=upsert
    replace_where: str | None = None

    @classmethod
    def from_options(cls, raw: Mapping[str, str] | None, column_names: list[str]) -> DeltaSinkConfig:
        options = O.options(raw)
        table = TableLocation.from_options(options)
        partition_columns: tuple[str, ...] = ()
        partition_text = O.partition_columns.get(options)
        if partition_text is not None and partition_text.strip():
            partition_columns = tuple(c.strip() for c in partition_text.split(","))
            by_lower = {name.lower(): name for name in column_names}
            resolved = []
            for column in partition_columns:
                if column.lower() not in by_lower:
                    raise ConfigError(O.partition_columns.key, f"column '{column}' is not in the input",
                                      ", ".join(column_names))
                resolved.append(by_lower[column.lower()])
            if len(set(resolved)) != len(resolved):
                raise ConfigError(O.partition_columns.key, f"names a column twice: {partition_text}")
            if len(resolved) == len(column_names):
                raise ConfigError(O.partition_columns.key, "names every column; a data file needs one column at least")
            partition_columns = tuple(resolved)
        app_id = options.get(O.txn_app_id.key)
        version = O.txn_version.get(options)
        if (app_id is None) != (version is None):
            raise ConfigError(O.txn_app_id.key if app_id is None else O.txn_version.key,
                              "is required together with " + (O.txn_version.key if app_id is not None
                                                              else O.txn_app_id.key))
        if app_id is not None and not app_id.strip():
            raise ConfigError(O.txn_app_id.key, "must not be empty")
        target = O.target_file_size.value(options)
        if target < 1:
            raise ConfigError(O.target_file_size.key, f"must be at least 1 byte, got {target}")
        checkpoint_text = O.checkpoint_location.get(options)
        checkpoint = Path(checkpoint_text) if checkpoint_text is not None else None
        compaction = None
        every = O.compaction_every.get(options)
        if every is not None:
            compaction_target = O.compaction_target.get(options)
            compaction = CompactionConfig(every=every,
                                          target_file_size=compaction_target if compaction_target is not None else target)
            if compaction.target_file_size < 1:
                raise ConfigError(O.compaction_target.key, f"must be at least 1 byte, got {compaction.target_file_size}")
        else:
            O.check_applies(options, O.compaction_every.key, "unset")
        changelog = Changelog.from_options(options)
        if changelog is not None:
            changelog.check_columns(column_names)
            if changelog.op_column is not None and changelog.op_column in partition_columns:
                raise ConfigError(O.partition_columns.key, f"names the opColumn '{changelog.op_column}', which is not "
                                  "written to the table")
        replace_where = O.replace_where.get(options)
        if replace_where is not None:
            if not replace_where.strip():
                raise ConfigError(O.replace_where.key, "must not be empty", "a SQL predicate, e.g. day = '2026-01-01'")
            if changelog is not None:
                raise ConfigError(O.replace_where.key, "applies to writeMode=append (an overwrite), not to "
                                  "writeMode=upsert")
        return cls(table=table, partition_columns=partition_columns, partition_columns_given=partition_text is not None,
                   merge_schema=O.merge_schema.value(options),
                   txn_app_id=app_id, txn_version=version, target_file_size=target,
                   user_metadata=O.user_metadata.get(options), checkpoint=checkpoint, compaction=compaction,
                   changelog=changelog, replace_where=replace_where)
