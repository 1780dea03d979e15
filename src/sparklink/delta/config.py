"""The Delta sink's options (validated on the driver, carried to executors in the pickled sink)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from sparklink.delta.table_location import TableLocation
from sparklink.errors import ConfigError
from sparklink.options import Options, parse_bool, parse_int, parse_size
from sparklink.sink.txn import (  # the SDK's keys; Delta records them itself
    OPTION_TXN_APP_ID,
    OPTION_TXN_VERSION,
)
from sparklink.storage import S3_OPTIONS

OPTION_PATH = "path"
OPTION_PARTITION_COLUMNS = "partitionColumns"
OPTION_MERGE_SCHEMA = "mergeSchema"
OPTION_TARGET_FILE_SIZE = "targetFileSize"
OPTION_USER_METADATA = "userMetadata"
OPTION_CHECKPOINT_LOCATION = "checkpointLocation"
OPTION_COMPACTION_EVERY = "compaction.everyNCheckpoints"
OPTION_COMPACTION_TARGET = "compaction.targetFileSize"
KNOWN_OPTIONS = (OPTION_PATH, OPTION_PARTITION_COLUMNS, OPTION_MERGE_SCHEMA, OPTION_TXN_APP_ID, OPTION_TXN_VERSION,
                 OPTION_TARGET_FILE_SIZE, OPTION_USER_METADATA, OPTION_CHECKPOINT_LOCATION, OPTION_COMPACTION_EVERY,
                 OPTION_COMPACTION_TARGET) + S3_OPTIONS
DEFAULT_TARGET_FILE_SIZE = 128 * 1024 * 1024


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
    merge_schema: bool = False
    txn_app_id: str | None = None
    txn_version: int | None = None
    target_file_size: int = DEFAULT_TARGET_FILE_SIZE
    user_metadata: str | None = None
    checkpoint: Path | None = None
    compaction: CompactionConfig | None = None

    @classmethod
    def from_options(cls, raw: Mapping[str, str] | None, column_names: list[str]) -> DeltaSinkConfig:
        options = Options(raw)
        options.reject_unknown(KNOWN_OPTIONS)
        table = TableLocation.from_options(options)
        partition_columns: tuple[str, ...] = ()
        if OPTION_PARTITION_COLUMNS in options and options[OPTION_PARTITION_COLUMNS].strip():
            partition_columns = tuple(c.strip() for c in options[OPTION_PARTITION_COLUMNS].split(","))
            by_lower = {name.lower(): name for name in column_names}
            resolved = []
            for column in partition_columns:
                if column.lower() not in by_lower:
                    raise ConfigError(OPTION_PARTITION_COLUMNS, f"column '{column}' is not in the input",
                                      ", ".join(column_names))
                resolved.append(by_lower[column.lower()])
            if len(set(resolved)) != len(resolved):
                raise ConfigError(OPTION_PARTITION_COLUMNS, f"names a column twice: {options[OPTION_PARTITION_COLUMNS]}")
            if len(resolved) == len(column_names):
                raise ConfigError(OPTION_PARTITION_COLUMNS, "names every column; a data file needs one column at least")
            partition_columns = tuple(resolved)
        app_id = options.get(OPTION_TXN_APP_ID)
        version = (parse_int(OPTION_TXN_VERSION, options[OPTION_TXN_VERSION], minimum=0)
                   if OPTION_TXN_VERSION in options else None)
        if (app_id is None) != (version is None):
            raise ConfigError(OPTION_TXN_APP_ID if app_id is None else OPTION_TXN_VERSION,
                              "is required together with " + (OPTION_TXN_VERSION if app_id is not None else OPTION_TXN_APP_ID))
        if app_id is not None and not app_id.strip():
            raise ConfigError(OPTION_TXN_APP_ID, "must not be empty")
        target = (parse_size(OPTION_TARGET_FILE_SIZE, options[OPTION_TARGET_FILE_SIZE])
                  if OPTION_TARGET_FILE_SIZE in options else DEFAULT_TARGET_FILE_SIZE)
        if target < 1:
            raise ConfigError(OPTION_TARGET_FILE_SIZE, f"must be at least 1 byte, got {target}")
        checkpoint = Path(options[OPTION_CHECKPOINT_LOCATION]) if OPTION_CHECKPOINT_LOCATION in options else None
        compaction = None
        if OPTION_COMPACTION_EVERY in options:
            compaction = CompactionConfig(
                every=parse_int(OPTION_COMPACTION_EVERY, options[OPTION_COMPACTION_EVERY], minimum=1),
                target_file_size=(parse_size(OPTION_COMPACTION_TARGET, options[OPTION_COMPACTION_TARGET])
                                  if OPTION_COMPACTION_TARGET in options else target))
            if compaction.target_file_size < 1:
                raise ConfigError(OPTION_COMPACTION_TARGET, f"must be at least 1 byte, got {compaction.target_file_size}")
        elif OPTION_COMPACTION_TARGET in options:
            raise ConfigError(OPTION_COMPACTION_TARGET, f"applies only together with {OPTION_COMPACTION_EVERY}")
        return cls(table=table, partition_columns=partition_columns,
                   merge_schema=parse_bool(OPTION_MERGE_SCHEMA, options.get(OPTION_MERGE_SCHEMA, "false")),
                   txn_app_id=app_id, txn_version=version, target_file_size=target,
                   user_metadata=options.get(OPTION_USER_METADATA), checkpoint=checkpoint,
                   compaction=compaction)
