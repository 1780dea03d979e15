"""Options of the ``sparklink.postgres`` sink, parsed once on the driver at query start."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass

from pyspark.sql.types import StructType

from sparklink.errors import ConfigError
from sparklink.options import Options, parse_bool, parse_choice
from sparklink.postgres.connection import OPTION_DSN, ConnectionSettings
from sparklink.postgres.identifiers import TableName, parse_table_name

OPTION_TABLE = "table"
OPTION_SEMANTIC = "semantic"
OPTION_KEY_COLUMNS = "keyColumns"
OPTION_CHECKPOINT_LOCATION = "checkpointLocation"
OPTION_CREATE_TABLE = "createTable"
OPTION_SINK_ID = "sinkId"

SEMANTIC_UPSERT = "upsert"
SEMANTIC_TWO_PHASE = "two-phase"
SEMANTIC_WRITE_AHEAD = "write-ahead"
SEMANTIC_AT_LEAST_ONCE = "at-least-once"
SEMANTICS = (SEMANTIC_UPSERT, SEMANTIC_TWO_PHASE, SEMANTIC_WRITE_AHEAD, SEMANTIC_AT_LEAST_ONCE)
KNOWN_OPTIONS = (OPTION_DSN, OPTION_TABLE, OPTION_SEMANTIC, OPTION_KEY_COLUMNS, OPTION_CHECKPOINT_LOCATION,
                 OPTION_CREATE_TABLE, OPTION_SINK_ID)
IGNORED_OPTIONS = ("path",)  # Spark may pass a path for save(path); the table option names the target


@dataclass(frozen=True, kw_only=True)
class PostgresSinkConfig:
    """Validated sink settings; picklable (no live handles), shipped to executors."""

    connection: ConnectionSettings
    table: TableName
    semantic: str
    key_columns: tuple[str, ...]
    checkpoint_location: str | None
    create_table: bool
    sink_id: str

    def __post_init__(self) -> None:
        if self.semantic not in SEMANTICS:
            raise ConfigError(OPTION_SEMANTIC, f"unknown value '{self.semantic}'", ", ".join(SEMANTICS))
        if self.semantic == SEMANTIC_UPSERT and not self.key_columns:
            raise ConfigError(OPTION_KEY_COLUMNS, "is required for semantic=upsert (the conflict target)",
                              "comma-separated column names, e.g. id or tenant,id")
        if self.semantic in (SEMANTIC_TWO_PHASE, SEMANTIC_WRITE_AHEAD) and not self.checkpoint_location:
            raise ConfigError(OPTION_CHECKPOINT_LOCATION, f"is required for semantic={self.semantic} (the commit "
                                                          "log and recovery live there)")
        if not self.sink_id or not all(c.isalnum() for c in self.sink_id) or len(self.sink_id) > 40:
            raise ConfigError(OPTION_SINK_ID, f"'{self.sink_id}' is not valid", "1 to 40 letters or digits")

    def validate_schema(self, schema: StructType) -> None:
        names = schema.names
        missing = [k for k in self.key_columns if k not in names]
        if missing:
            raise ConfigError(OPTION_KEY_COLUMNS, f"column(s) {missing} are not in the DataFrame", ", ".join(names))
        if self.semantic == SEMANTIC_UPSERT and len(set(self.key_columns)) != len(self.key_columns):
            raise ConfigError(OPTION_KEY_COLUMNS, f"lists a column twice: {list(self.key_columns)}")

    @classmethod
    def from_options(cls, options: Mapping[str, str] | None) -> "PostgresSinkConfig":
        opts = Options(options)
        opts.reject_unknown(KNOWN_OPTIONS, ignore=IGNORED_OPTIONS)
        connection = ConnectionSettings(dsn=opts.require(OPTION_DSN))
        table = parse_table_name(opts.require(OPTION_TABLE), option=OPTION_TABLE)
        semantic = parse_choice(OPTION_SEMANTIC, opts.get(OPTION_SEMANTIC, SEMANTIC_UPSERT), SEMANTICS)
        keys = tuple(k.strip() for k in opts.get(OPTION_KEY_COLUMNS, "").split(",") if k.strip())
        checkpoint = opts.get(OPTION_CHECKPOINT_LOCATION)
        checkpoint = os.path.abspath(checkpoint) if checkpoint else None
        sink_id = opts.get(OPTION_SINK_ID) or _default_sink_id(checkpoint, table)
        return cls(connection=connection, table=table, semantic=semantic, key_columns=keys,
                   checkpoint_location=checkpoint, create_table=parse_bool(OPTION_CREATE_TABLE,
                                                                          opts.get(OPTION_CREATE_TABLE, "true")),
                   sink_id=sink_id)


def _default_sink_id(checkpoint: str | None, table: TableName) -> str:
    """A stable id per (checkpoint, table): it prefixes prepared-transaction ids and marker rows."""
    digest = hashlib.sha256(f"{checkpoint or ''}\0{table}".encode()).hexdigest()
    return digest[:16]
