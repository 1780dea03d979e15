"""The ``sparklink.postgres-cdc`` enumerator (driver side): the slot, the snapshot, log positions.

* :meth:`CdcEnumerator.initial_offset` creates the slot (or takes an existing one's confirmed
  position X). With ``startingPosition=snapshot`` the offsets then walk through the tables'
  rows in primary-key order, a bounded number of chunks per micro-batch (``maxChangesPerTrigger``
  rows), each chunk a Spark task; the log position stays at X until the snapshot is read. A
  chunk is read at the time its task runs (no exported snapshot: nothing dies with the driver),
  so a restarted query goes on with the chunks after the last committed batch.
* Reconciliation: the log is then read from X, so every change committed during the snapshot
  comes after the snapshot's rows. A snapshot row carries ``_lsn`` 0, every change its WAL
  position: applied in ``_lsn`` order by key (an upsert sink with ``sequenceColumn=_lsn``), the
  changes replay over rows that may already show them and end at the table's state.
* :meth:`latest_offset` peeks the slot's commit records (never consuming them) and returns the
  end LSN of the last whole transaction that the read limit admits.
* :meth:`commit` advances the slot to a batch's end once Spark has committed the batch (never
  before, never backwards), so PostgreSQL keeps WAL only for uncommitted batches.
"""

from __future__ import annotations

import psycopg
from psycopg import sql

from sparklink.postgres.cdc_config import (
    CdcConfig,
    CdcError,
    SnapshotPosition,
    offset,
    offset_lsn,
    snapshot_position,
)
from sparklink.postgres.pgoutput import format_lsn
from sparklink.source import Offset, ReadLimit, Split, SplitEnumerator

# the end LSN of every commit record (bytes 11-18 of a Commit message) with the message's ordinal
COMMITS_SQL = ("SELECT n, substring(data from 11 for 8) FROM pg_logical_slot_peek_binary_changes(%s, %s::pg_lsn, "
               "NULL, 'proto_version', '1', 'publication_names', %s) WITH ORDINALITY AS p(lsn, xid, data, n) "
               "WHERE get_byte(data, 0) = 67")


def _int8(data: bytes) -> int:
    return int.from_bytes(data, "big", signed=True)


class CdcEnumerator(SplitEnumerator):
    def __init__(self, config: CdcConfig, key_columns: list[list[str]]):
        self.config = config
        self.key_columns = key_columns  # per table of config.tables
        self._conn: psycopg.Connection | None = None
        self._checked_start = False
        self._initial: Offset | None = None

    @property
    def conn(self) -> psycopg.Connection:
        if self._conn is None:
            self._conn = self.config.connection.connect(autocommit=True)
        return self._conn

    def _slot(self) -> tuple[int, bool, str] | None:
        """(confirmed position, active, plugin) of the slot, None when it does not exist."""
        row = self.conn.execute("SELECT (confirmed_flush_lsn - '0/0'::pg_lsn)::bigint, active, plugin, database "
                                "= current_database() FROM pg_replication_slots WHERE slot_name = %s",
                                [self.config.slot_name]).fetchone()
        if row is None:
            return None
        if row[2] != "pgoutput" or not row[3]:
            raise CdcError(f"replication slot '{self.config.slot_name}' is not a pgoutput slot of this database "
                           f"(plugin {row[2]}); choose another slotName")
        return int(row[0]), bool(row[1]), str(row[2])

    # -- where a new query starts ----------------------------------------------------------------
    def initial_offset(self) -> Offset:
        """Spark asks more than once per run: the first answer is kept."""
        if self._initial is None:
            self._initial = self._create_slot()
        return dict(self._initial)

    def _create_slot(self) -> Offset:
        config = self.config
        existing = self._slot()
        if existing is not None:
            # the slot of an earlier query with its checkpoint dropped (or made by hand): its position is where
            # the log starts; a snapshot read after it is reconciled with the log like any other
            position = existing[0]
        else:
            try:
                row = self.conn.execute("SELECT (lsn - '0/0'::pg_lsn)::bigint FROM "
                                        "pg_create_logical_replication_slot(%s, 'pgoutput')",
                                        [config.slot_name]).fetchone()
            except psycopg.Error as exc:
                raise config.connection.error(f"creating replication slot '{config.slot_name}'", exc) from None
            assert row is not None
            position = int(row[0])
        return offset(position, snapshot=(0, None) if config.starting_position == "snapshot" else None)

    # -- what is available -----------------------------------------------------------------------
    def _check_start(self, start: Offset) -> None:
        """Once per run: the slot must not be past the checkpoint's position."""
        if self._checked_start:
            return
        slot = self._slot()
        position = offset_lsn(start)
        if slot is None:
            raise CdcError(f"replication slot '{self.config.slot_name}' does not exist, but the checkpoint is at "
                           f"{format_lsn(position)}: changes after it cannot be read; start a new query (new "
                           f"checkpoint) to take a new snapshot")
        if slot[0] > position:
            raise CdcError(f"replication slot '{self.config.slot_name}' is at {format_lsn(slot[0])}, past the "
                           f"checkpoint's offset {format_lsn(position)}: the changes in between would be lost; "
                           f"start a new query with a new checkpoint and slot")
        self._checked_start = True

    def latest_offset(self, start: Offset, limit: ReadLimit) -> Offset:
        position = offset_lsn(start)
        self._check_start(start)
        snapshot = snapshot_position(start)
        if snapshot is not None:
            return self._snapshot_end(position, snapshot, limit.max_rows)
        # Spark asks for the next batch only once the previous one is in its commit log, so ``start`` is
        # committed: the slot may forget what precedes it. Spark calls commit() for a batch only when it
        # builds the batch after it; this call is what confirms the last batch of an availableNow run.
        self._advance(position)
        until = offset_lsn(limit.until) if limit.until is not None else None
        if until is not None and until <= position:
            return dict(start)
        upto = format_lsn(until) if until is not None else None
        try:
            commits = self.conn.execute(COMMITS_SQL, [self.config.slot_name, upto, self.config.publication]).fetchall()
        except psycopg.Error as exc:
            raise self.config.connection.error(f"peeking slot '{self.config.slot_name}'", exc) from None
        end, first = position, None
        for messages, tail in commits:
            end_lsn = _int8(tail)
            if end_lsn <= position:
                first = messages
                continue
            if (limit.max_rows is not None and end != position
                    and messages - (first or 0) > limit.max_rows):
                break
            end = end_lsn
        return offset(end)

    def available_now_offset(self, start: Offset | None) -> Offset | None:
        row = self.conn.execute("SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint").fetchone()
        assert row is not None
        return offset(row[0])

    def report_latest_offset(self) -> Offset | None:
        row = self.conn.execute("SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint").fetchone()
        return offset(row[0]) if row is not None else None

    def supported_limits(self) -> frozenset[str]:
        return frozenset({"max_rows"})

    # -- what a batch reads ----------------------------------------------------------------------
    def plan_splits(self, start: Offset, end: Offset) -> list[Split]:
        first, last = offset_lsn(start), offset_lsn(end)
        snapshot = snapshot_position(start)
        if snapshot is not None:
            return self._snapshot_splits(snapshot, snapshot_position(end))
        if last <= first:
            return []
        return [Split(split_id=f"log-{first}-{last}", state={"kind": "log", "from": first, "to": last})]

    # -- the snapshot ----------------------------------------------------------------------------
    def _key_sql(self, index: int) -> tuple[sql.Composable, sql.Composable, int]:
        keys = self.key_columns[index]
        row = sql.SQL("({})").format(sql.SQL(", ").join(sql.Identifier(k) for k in keys))
        texts = sql.SQL(", ").join(sql.SQL("{}::text").format(sql.Identifier(k)) for k in keys)
        return row, texts, len(keys)

    def _snapshot_end(self, position: int, snapshot: SnapshotPosition, max_rows: int | None) -> Offset:
        """The end of the next snapshot batch: ``max_rows`` rows of the current table (whole chunks),
        or the rest of it; the snapshot ends (the log begins) after the last table."""
        index, lower = snapshot
        tables = self.config.tables
        if max_rows is None:
            return offset(position)  # no limit: the whole (rest of the) snapshot is one batch
        if self.key_columns[index]:
            chunk = self.config.snapshot_chunk_rows
            rows = max(chunk, max_rows // chunk * chunk)
            key_row, texts, width = self._key_sql(index)
            where = (sql.SQL("WHERE {} >= ({})").format(key_row, sql.SQL(", ").join(sql.Placeholder() * width))
                     if lower is not None else sql.SQL(""))
            # ORDER BY the table's (qualified) columns, not the text output columns of the same names
            query = sql.SQL("SELECT {texts} FROM {table} AS t__ {where} ORDER BY {keys} OFFSET {rows} LIMIT 1").format(
                texts=texts, table=tables[index].identifier, where=where,
                keys=sql.SQL(", ").join(sql.Identifier("t__", k) for k in self.key_columns[index]),
                rows=sql.Literal(rows))
            try:
                row = self.conn.execute(query, lower or []).fetchone()
            except psycopg.Error as exc:
                raise self.config.connection.error(f"planning the snapshot of {self.config.label(index)}",
                                                   exc) from None
            if row is not None:
                return offset(position, snapshot=(index, [str(v) for v in row]))
        # the rest of this table (a table without a primary key is one chunk) is the batch
        return offset(position, snapshot=(index + 1, None)) if index + 1 < len(tables) else offset(position)

    def _snapshot_splits(self, start: SnapshotPosition, end: SnapshotPosition | None) -> list[Split]:
        index, lower = start
        splits: list[Split] = []
        for table in range(index, len(self.config.tables)):
            low = lower if table == index else None
            if end is not None and table == end[0]:
                if end[1] is not None:
                    splits += self._chunks(table, low, end[1])
                break
            splits += self._chunks(table, low, None)
        return splits

    def _chunks(self, index: int, lower: list[str] | None, upper: list[str] | None) -> list[Split]:
        """The chunks of ``[lower, upper)`` of a table, ``snapshotChunkRows`` rows each by primary key."""
        bounds: list[list[str]] = []
        if self.key_columns[index]:
            key_row, texts, width = self._key_sql(index)
            conditions: list[sql.Composable] = []
            params: list[str] = []
            for bound, operator in ((lower, ">="), (upper, "<")):
                if bound is not None:
                    conditions.append(sql.SQL("{} {} ({})").format(key_row, sql.SQL(operator),
                                                                  sql.SQL(", ").join(sql.Placeholder() * width)))
                    params.extend(bound)
            where = sql.SQL(" AND ").join(conditions) if conditions else sql.SQL("TRUE")
            keys = sql.SQL(", ").join(sql.Identifier(k) for k in self.key_columns[index])
            query = sql.SQL("SELECT {texts} FROM (SELECT {keys}, row_number() OVER (ORDER BY {keys}) AS rn__ FROM "
                            "{table} WHERE {where}) s WHERE rn__ > 1 AND mod(rn__, {chunk}) = 1 ORDER BY rn__").format(
                texts=texts, keys=keys, table=self.config.tables[index].identifier, where=where,
                chunk=sql.Literal(self.config.snapshot_chunk_rows))
            try:
                bounds = [[str(v) for v in row] for row in self.conn.execute(query, params).fetchall()]
            except psycopg.Error as exc:
                raise self.config.connection.error(f"planning the snapshot's chunks of {self.config.label(index)}",
                                                   exc) from None
        edges: list[list[str] | None] = [lower, *bounds, upper]
        return [Split(split_id=f"snapshot-{index}-{edges[i]}", state={
            "kind": "snapshot", "table": index, "key": self.key_columns[index], "lower": edges[i],
            "upper": edges[i + 1]}) for i in range(len(edges) - 1)]

    # -- after Spark committed -------------------------------------------------------------------
    def _advance(self, position: int) -> None:
        slot = self._slot()
        if slot is None or slot[0] >= position:
            return  # never backwards (pg_replication_slot_advance refuses it)
        try:
            self.conn.execute("SELECT pg_replication_slot_advance(%s, %s::pg_lsn)",
                              [self.config.slot_name, format_lsn(position)])
        except psycopg.Error as exc:
            raise self.config.connection.error(f"advancing slot '{self.config.slot_name}'", exc) from None

    def commit(self, end: Offset) -> None:
        if snapshot_position(end) is not None:
            return  # the log is read from the slot's position once the snapshot is
        self._advance(offset_lsn(end))

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
