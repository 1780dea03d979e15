"""Options of the ``sparklink.postgres`` sink, parsed once on the driver at query start."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass

from pyspark.sql.types import StructType

from sparklink.errors import ConfigError
from sparklink.options import BOOL, Option, SparkOptions, choice, string
from sparklink.postgres.connection import ConnectionSettings, PostgresConnectionOptions
from sparklink.postgres.identifiers import TableName, parse_table_name
from sparklink.sink.changelog import Changelog, ChangelogOptions
from sparklink.sink.txn import TxnOptions

SEMANTIC_UPSERT = "upsert"
SEMANTIC_TWO_PHASE = "two-phase"
SEMANTIC_WRITE_AHEAD = "write-ahead"
SEMANTIC_AT_LEAST_ONCE = "at-least-once"
SEMANTICS = (SEMANTIC_UPSERT, SEMANTIC_TWO_PHASE, SEMANTIC_WRITE_AHEAD, SEMANTIC_AT_LEAST_ONCE)


class PostgresSinkOptions(PostgresConnectionOptions, TxnOptions, ChangelogOptions):
    """``sparklink.postgres`` as a sink. ``keyColumns`` is the sink's own (the conflict target of
    ``semantic=upsert``) and also the key of ``writeMode=upsert`` (:mod:`sparklink.sink.changelog`)."""

    ignored = ("path",)  # Spark may pass a path for save(path); the table option names the target
    table = Option("table", string("`name` or `schema.name`"), required=True,
                   doc="PostgreSQL rules: bare names fold to lower case, `\"Quoted \"\"Names\"\"\"` keep case and any "
                       "character")
    semantic = Option("semantic", choice(*SEMANTICS), default=SEMANTIC_UPSERT, doc="see [semantics](#semantics-and-guarantees-with-a-replayable-source-such-as-kafka-files-sparklinksequence)")
    key_columns = Option("keyColumns", string("comma-separated DataFrame columns"),
                         doc="required for `semantic=upsert` and `writeMode=upsert`: a primary key or unique index on "
                             "exactly these columns must exist, or the sink creates one when it creates the table")
    checkpoint_location = SparkOptions.checkpoint_location.documented(
        "required for `two-phase` and `write-ahead` (commit log and write-ahead log live under "
        "`<checkpointLocation>/sparklink/`); for `df.write` give it as an option")
    create_table = Option("createTable", BOOL, default=True,
                          doc="create a missing table from the DataFrame schema (nested types become `jsonb`)")
    sink_id = Option("sinkId", string("1 to 40 letters or digits"), default_doc="hash of checkpoint + table",
                     doc="prefix of prepared-transaction ids and marker rows")


O = PostgresSinkOptions


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
    changelog: Changelog | None = None  # writeMode=upsert: deletes by key, sequenceColumn ordering

    @property
    def keyed(self) -> bool:
        """True when the sink writes by key (ON CONFLICT on ``key_columns``): semantic=upsert or
        writeMode=upsert."""
        return self.semantic == SEMANTIC_UPSERT or self.changelog is not None

    def __post_init__(self) -> None:
        if self.semantic not in SEMANTICS:
            raise ConfigError(O.semantic.key, f"unknown value '{self.semantic}'", ", ".join(SEMANTICS))
        if self.semantic == SEMANTIC_UPSERT and not self.key_columns:
            raise ConfigError(O.key_columns.key, "is required for semantic=upsert (the conflict target)",
                              "comma-separated column names, e.g. id or tenant,id")
        if self.changelog is not None and self.changelog.key_columns != self.key_columns:
            raise ConfigError(O.key_columns.key, "differs from the changelog's key columns")
        if self.semantic in (SEMANTIC_TWO_PHASE, SEMANTIC_WRITE_AHEAD) and not self.checkpoint_location:
            raise ConfigError(O.checkpoint_location.key, f"is required for semantic={self.semantic} (the commit "
                                                          "log and recovery live there)")
        if not self.sink_id or not all(c.isalnum() for c in self.sink_id) or len(self.sink_id) > 40:
            raise ConfigError(O.sink_id.key, f"'{self.sink_id}' is not valid", "1 to 40 letters or digits")

    def validate_schema(self, schema: StructType) -> None:
        names = schema.names
        missing = [k for k in self.key_columns if k not in names]
        if missing:
            raise ConfigError(O.key_columns.key, f"column(s) {missing} are not in the DataFrame", ", ".join(names))
        if self.semantic == SEMANTIC_UPSERT and len(set(self.key_columns)) != len(self.key_columns):
            raise ConfigError(O.key_columns.key, f"lists a column twice: {list(self.key_columns)}")
        if self.changelog is not None:
            self.changelog.check_columns(names)

    def stored_schema(self, schema: StructType) -> StructType:
        """The DataFrame columns written to the table (``writeMode=upsert``: all but ``opColumn``)."""
        if self.changelog is None or self.changelog.op_column is None:
            return schema
        return StructType([field for field in schema.fields if field.name != self.changelog.op_column])

    @classmethod
    def from_options(cls, options: Mapping[str, str] | None) -> "PostgresSinkConfig":
        opts = O.options(options)
        connection = ConnectionSettings(dsn=O.dsn.value(opts))
        table = parse_table_name(O.table.value(opts), option=O.table.key)
        semantic = O.semantic.value(opts)
        keys = tuple(k.strip() for k in (O.key_columns.get(opts) or "").split(",") if k.strip())
        checkpoint = O.checkpoint_location.get(opts)
        checkpoint = os.path.abspath(checkpoint) if checkpoint else None
        sink_id = O.sink_id.get(opts) or _default_sink_id(checkpoint, table)
        changelog = Changelog.from_options(opts)
        return cls(connection=connection, table=table, semantic=semantic, key_columns=keys,
                   checkpoint_location=checkpoint, create_table=O.create_table.value(opts), sink_id=sink_id,
                   changelog=changelog)


def _default_sink_id(checkpoint: str | None, table: TableName) -> str:
    """A stable id per (checkpoint, table): it prefixes prepared-transaction ids and marker rows."""
    digest = hashlib.sha256(f"{checkpoint or ''}\0{table}".encode()).hexdigest()
    return digest[:16]
