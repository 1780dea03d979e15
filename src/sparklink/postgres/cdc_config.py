"""Options of the ``sparklink.postgres-cdc`` source and its offsets (driver side; the parsed
:class:`CdcConfig` is small and picklable, so it travels to the executors inside the source).

An offset is a log position: ``{"v": 1, "lsn": <int>}`` is "every transaction whose commit record
ends at or before ``lsn``". While the initial snapshot is being read, an offset also carries
``"snapshot": {"table": i, "from": key}``: the snapshot's rows of the tables before the i-th (of the
``tables`` list) and of the i-th below primary key ``key`` (text values; ``null``: none yet) are
delivered, the log is not read yet. Offsets live in Spark's checkpoint, so a restarted query
goes on with the next chunk; the chunks of committed batches are never read again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sparklink.errors import ConfigError, SparklinkError
from sparklink.options import Option, choice, custom, integer, string
from sparklink.postgres.connection import ConnectionSettings, PostgresConnectionOptions
from sparklink.postgres.identifiers import TableName, parse_table_name
from sparklink.postgres.pgoutput import format_lsn

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

    table = Option("table", string("`schema.name`"), default_doc="required unless `tables`",
                   doc="the table whose changes are read, schema-qualified (`public.orders`); quote names as in SQL")
    tables = Option("tables", string("comma-separated `schema.name` list"), default_doc="-",
                    doc="several tables into one stream, instead of `table`: their columns must agree (names and "
                        "types, in order); `_table` tells the rows apart. Snapshot in the list's order")
    slot_name = Option("slotName", custom(_slot_name, "a replication slot name"), required=True,
                       doc="the logical replication slot (plugin pgoutput); created by the query when it starts with "
                           "no checkpoint. One slot per query: the slot is the query's position in the log")
    publication = Option("publication", custom(_publication_name, "a publication name"), required=True,
                         doc="the publication of the table; created `FOR TABLE <table> WITH (publish = 'insert, "
                             "update, delete')` when absent")
    starting_position = Option("startingPosition", choice(STARTING_SNAPSHOT, STARTING_LATEST),
                               default=STARTING_SNAPSHOT,
                               doc="`snapshot`: the tables' rows (`_op` = `r`, read in primary-key chunks after the "
                                   "slot's creation, resumable), then every change from the slot's start (`_lsn` "
                                   "orders them after the rows); `latest`: changes after the slot's position only")
    max_changes_per_trigger = Option("maxChangesPerTrigger", integer(1), default_doc="no limit",
                                     doc="at most about this many change messages per micro-batch; whole "
                                         "transactions always (one larger transaction is one batch). During the "
                                         "snapshot: at most this many snapshot rows per micro-batch (whole chunks), "
                                         "so that a restart re-reads at most one batch's chunks")
    snapshot_chunk_rows = Option("snapshotChunkRows", integer(1), default=100_000,
                                 doc="rows per snapshot chunk (one Spark task each), by primary key")


O = PostgresCdcOptions


class CdcError(SparklinkError):
    """The change stream cannot continue (or start) safely: slot state, schema change, set-up."""


@dataclass(frozen=True, kw_only=True)
class CdcConfig:
    connection: ConnectionSettings
    tables: tuple[TableName, ...]
    slot_name: str
    publication: str
    starting_position: str
    max_changes_per_trigger: int | None
    snapshot_chunk_rows: int

    @classmethod
    def from_options(cls, options: Mapping[str, str] | None) -> "CdcConfig":
        opts = O.options(options)
        one, several = O.table.get(opts), O.tables.get(opts)
        if (one is None) == (several is None):
            raise ConfigError(O.table.key, "give either `table` or `tables` (a comma-separated list)"
                              if one is None else "give `table` or `tables`, not both")
        key = O.table.key if one is not None else O.tables.key
        tables = tuple(parse_table_name(text, option=key) for text in split_table_list(one or several or "", key))
        for table in tables:
            if table.schema is None:
                raise ConfigError(key, f"'{table.name}' is not schema-qualified", "schema.name, e.g. public.orders")
        if len(set(tables)) != len(tables):
            raise ConfigError(key, "a table is named twice")
        return cls(connection=ConnectionSettings(dsn=O.dsn.value(opts)), tables=tables,
                   slot_name=O.slot_name.value(opts), publication=O.publication.value(opts),
                   starting_position=O.starting_position.value(opts),
                   max_changes_per_trigger=O.max_changes_per_trigger.get(opts),
                   snapshot_chunk_rows=O.snapshot_chunk_rows.value(opts))


    def label(self, index: int) -> str:
        table = self.tables[index]
        return f"{table.schema}.{table.name}"

    @property
    def labels(self) -> str:
        return ", ".join(self.label(i) for i in range(len(self.tables)))


def split_table_list(text: str, key: str) -> list[str]:
    """``public.a, "We,ird".b`` -> its names (commas inside double quotes are part of a name)."""
    parts: list[str] = []
    current: list[str] = []
    quoted = False
    for char in text:
        if char == '"':
            quoted = not quoted
        if char == "," and not quoted:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    names = [part.strip() for part in parts]
    if not all(names):
        raise ConfigError(key, f"'{text}' has an empty table name", "public.a, public.b")
    return names


# A snapshot's progress: (index of the table in ``tables``, primary key (text values) from which
# its rows are still to be read, None: from its first row)
SnapshotPosition = tuple[int, "list[str] | None"]


def offset(lsn: int, *, snapshot: SnapshotPosition | None = None) -> dict[str, Any]:
    result: dict[str, Any] = {"v": OFFSET_VERSION, "lsn": int(lsn)}
    if snapshot is not None:
        result["snapshot"] = {"table": snapshot[0], "from": snapshot[1]}
    return result


def snapshot_position(value: Mapping[str, Any]) -> SnapshotPosition | None:
    """Where the snapshot of an offset stands; None when it is read (or was never asked for)."""
    snapshot = value.get("snapshot")
    if snapshot is None:
        return None
    if snapshot is True:  # the first release's offsets: the snapshot not read yet
        return (0, None)
    if not isinstance(snapshot, Mapping) or not isinstance(snapshot.get("table"), int):
        raise CdcError(f"offset {dict(value)!r} is not a sparklink.postgres-cdc offset (version {OFFSET_VERSION})")
    start = snapshot.get("from")
    return int(snapshot["table"]), None if start is None else [str(v) for v in start]


def describe_offset(value: Mapping[str, Any]) -> str:
    position = snapshot_position(value)
    where = format_lsn(offset_lsn(value))
    return where if position is None else f"{where} (snapshot of table #{position[0] + 1} from key {position[1]})"


def offset_lsn(value: Mapping[str, Any]) -> int:
    if value.get("v") != OFFSET_VERSION or not isinstance(value.get("lsn"), int):
        raise CdcError(f"offset {dict(value)!r} is not a sparklink.postgres-cdc offset (version {OFFSET_VERSION})")
    return int(value["lsn"])
