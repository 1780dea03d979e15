"""Options of the ``sparklink.postgres-cdc`` source and its offsets (driver side; the parsed
:class:`CdcConfig` is small and picklable, so it travels to the executors inside the source).

An offset is a log position: ``{"v": 1, "lsn": <int>}`` is "every transaction whose commit record
ends at or before ``lsn``"; the first offset of a query that starts with a snapshot also carries
``"snapshot": true`` (the snapshot has not been read yet). Offsets live in Spark's checkpoint.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sparklink.errors import ConfigError, SparklinkError
from sparklink.options import Option, choice, custom, integer, string
from sparklink.postgres.connection import ConnectionSettings, PostgresConnectionOptions
from sparklink.postgres.identifiers import TableName, parse_table_name

STARTING_SNAPSHOT = "snapshot"
STARTING_LATEST = "latest"
OFFSET_VERSION = 1
METADATA_COLUMNS = ("_op", "_lsn", "_commit_ts", "_table")


def _slot_name(key: str, text: str) -> str:
    name = text.strip()
    if not name or len(name) > 63 or not all(c.islower() or c.isdigit() or c == "_" for c in name):
        raise ConfigError(key, f"'{text}' is not a replication slot name",
                          "lower-case letters, digits and underscores, at most 63 characters")
    return name


def _publication_name(key: str, text: str) -> str:
    name = text.strip()
    if not name or len(name) > 63:
        raise ConfigError(key, f"'{text}' is not a publication name", "1 to 63 characters")
    return name


class PostgresCdcOptions(PostgresConnectionOptions):
    """``sparklink.postgres-cdc``: a table's changes from a logical replication slot (``spark.readStream``)."""

    table = Option("table", string("`schema.name`"), required=True,
                   doc="the table whose changes are read, schema-qualified (`public.orders`); quote names as in SQL")
    slot_name = Option("slotName", custom(_slot_name, "a replication slot name"), required=True,
                       doc="the logical replication slot (plugin pgoutput); created by the query when it starts with "
                           "no checkpoint. One slot per query: the slot is the query's position in the log")
    publication = Option("publication", custom(_publication_name, "a publication name"), required=True,
                         doc="the publication of the table; created `FOR TABLE <table> WITH (publish = 'insert, "
                             "update, delete')` when absent")
    starting_position = Option("startingPosition", choice(STARTING_SNAPSHOT, STARTING_LATEST),
                               default=STARTING_SNAPSHOT,
                               doc="`snapshot`: the table's rows at the slot's creation (`_op` = `r`), then every "
                                   "change after; `latest`: changes after the slot's position only")
    max_changes_per_trigger = Option("maxChangesPerTrigger", integer(1), default_doc="no limit",
                                     doc="at most about this many change messages per micro-batch; whole "
                                         "transactions always (one larger transaction is one batch)")
    snapshot_chunk_rows = Option("snapshotChunkRows", integer(1), default=100_000,
                                 doc="rows per snapshot chunk (one Spark task each), by primary key")


O = PostgresCdcOptions


class CdcError(SparklinkError):
    """The change stream cannot continue (or start) safely: slot state, schema change, set-up."""


@dataclass(frozen=True, kw_only=True)
class CdcConfig:
    connection: ConnectionSettings
    table: TableName
    slot_name: str
    publication: str
    starting_position: str
    max_changes_per_trigger: int | None
    snapshot_chunk_rows: int

    @classmethod
    def from_options(cls, options: Mapping[str, str] | None) -> "CdcConfig":
        opts = O.options(options)
        table = parse_table_name(O.table.value(opts), option=O.table.key)
        if table.schema is None:
            raise ConfigError(O.table.key, f"'{table.name}' is not schema-qualified", "schema.name, e.g. public.orders")
        return cls(connection=ConnectionSettings(dsn=O.dsn.value(opts)), table=table,
                   slot_name=O.slot_name.value(opts), publication=O.publication.value(opts),
                   starting_position=O.starting_position.value(opts),
                   max_changes_per_trigger=O.max_changes_per_trigger.get(opts),
                   snapshot_chunk_rows=O.snapshot_chunk_rows.value(opts))


def offset(lsn: int, *, snapshot: bool = False) -> dict[str, Any]:
    result: dict[str, Any] = {"v": OFFSET_VERSION, "lsn": int(lsn)}
    if snapshot:
        result["snapshot"] = True
    return result


def offset_lsn(value: Mapping[str, Any]) -> int:
    if value.get("v") != OFFSET_VERSION or not isinstance(value.get("lsn"), int):
        raise CdcError(f"offset {dict(value)!r} is not a sparklink.postgres-cdc offset (version {OFFSET_VERSION})")
    return int(value["lsn"])
