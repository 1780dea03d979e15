"""The ``sparklink.postgres-cdc`` enumerator (driver side): the slot, the snapshot, log positions.

* :meth:`CdcEnumerator.initial_offset` creates the slot. With ``startingPosition=snapshot`` it does
  so on a replication connection with ``SNAPSHOT 'export'`` and keeps that connection open: the
  exported snapshot (the table as of the slot's consistent point) lives only as long as it. The first
  batch, ``(snapshot at X, X]``, reads the table in primary-key chunks under that snapshot.
* :meth:`latest_offset` peeks the slot's commit records (never consuming them) and returns the
  end LSN of the last whole transaction that the read limit admits.
* :meth:`commit` advances the slot to a batch's end once Spark has committed the batch (never
  before, never backwards), so PostgreSQL keeps WAL only for uncommitted batches.
"""

from __future__ import annotations

import psycopg
from psycopg import sql

from sparklink.postgres.cdc_config import CdcConfig, CdcError, offset, offset_lsn
from sparklink.postgres.pgoutput import format_lsn
from sparklink.source import Offset, ReadLimit, Split, SplitEnumerator

# the end LSN of every commit record (bytes 11-18 of a Commit message) with the message's ordinal
COMMITS_SQL = ("SELECT n, substring(data from 11 for 8) FROM pg_logical_slot_peek_binary_changes(%s, %s::pg_lsn, "
               "NULL, 'proto_version', '1', 'publication_names', %s) WITH ORDINALITY AS p(lsn, xid, data, n) "
               "WHERE get_byte(data, 0) = 67")


def _int8(data: bytes) -> int:
    return int.from_bytes(data, "big", signed=True)


class CdcEnumerator(SplitEnumerator):
    def __init__(self, config: CdcConfig, key_columns: list[str]):
        self.config = config
        self.key_columns = key_columns
        self._conn: psycopg.Connection | None = None
        self._replication: psycopg.Connection | None = None  # holds the exported snapshot
        self._snapshot: str | None = None
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
        """Spark asks more than once per run (and again when it replays the first batch after a
        restart): the first answer is kept."""
        if self._initial is None:
            self._initial = self._create_slot()
        return dict(self._initial)

    def _create_slot(self) -> Offset:
        config = self.config
        existing = self._slot()
        if config.starting_position == "latest":
            if existing is not None:
                return offset(existing[0])
            try:
                row = self.conn.execute("SELECT (lsn - '0/0'::pg_lsn)::bigint FROM "
                                        "pg_create_logical_replication_slot(%s, 'pgoutput')",
                                        [config.slot_name]).fetchone()
            except psycopg.Error as exc:
                raise config.connection.error(f"creating replication slot '{config.slot_name}'", exc) from None
            assert row is not None
            return offset(row[0])
        if existing is not None:
            # no snapshot can be had for an existing slot; plan_splits refuses the snapshot batch
            return offset(existing[0], snapshot=True)
        try:
            self._replication = psycopg.connect(config.connection.dsn, autocommit=True, replication="database",
                                                application_name="sparklink-cdc")
            row = self._replication.execute(sql.SQL("CREATE_REPLICATION_SLOT {} LOGICAL pgoutput (SNAPSHOT 'export')")
                                            .format(sql.Identifier(config.slot_name))).fetchone()
        except psycopg.Error as exc:
            raise config.connection.error(f"creating replication slot '{config.slot_name}'", exc) from None
        assert row is not None
        _, consistent_point, self._snapshot, _ = row
        high, _, low = str(consistent_point).partition("/")
        return offset((int(high, 16) << 32) | int(low, 16), snapshot=True)

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
        if start.get("snapshot"):
            return offset(position)  # the first batch is the snapshot, alone
        self._release_snapshot()  # start is past the snapshot batch, which Spark has committed
        self._check_start(start)
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
        if start.get("snapshot") and not end.get("snapshot"):
            return self._snapshot_splits(first)
        if last <= first:
            return []
        return [Split(split_id=f"log-{first}-{last}", state={"kind": "log", "from": first, "to": last})]

    def _snapshot_splits(self, position: int) -> list[Split]:
        if self._snapshot is None:
            raise CdcError(f"the snapshot of slot '{self.config.slot_name}' (at {format_lsn(position)}) cannot be "
                           f"read: this run of the query did not create the slot (it existed before the query's first "
                           f"batch, or the driver restarted during the snapshot), and PostgreSQL keeps a slot's "
                           f"snapshot only while the session that created it lives. Drop the slot "
                           f"(SELECT pg_drop_replication_slot('{self.config.slot_name}')), the checkpoint and the "
                           f"output and start again, or use startingPosition=latest; see docs/postgres-cdc.md, 'Restarting during the snapshot'")
        bounds: list[list[str]] = []
        if self.key_columns:
            keys = sql.SQL(", ").join(sql.Identifier(k) for k in self.key_columns)
            texts = sql.SQL(", ").join(sql.SQL("{}::text").format(sql.Identifier(k)) for k in self.key_columns)
            query = sql.SQL("SELECT {texts} FROM (SELECT {keys}, row_number() OVER (ORDER BY {keys}) AS rn__ FROM "
                            "{table}) s WHERE rn__ > 1 AND rn__ % {chunk} = 1 ORDER BY rn__").format(
                texts=texts, keys=keys, table=self.config.table.identifier,
                chunk=sql.Literal(self.config.snapshot_chunk_rows))
            with self.config.connection.connect() as conn:
                try:
                    conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                    conn.execute(sql.SQL("SET TRANSACTION SNAPSHOT {}").format(sql.Literal(self._snapshot)))
                    bounds = [list(row) for row in conn.execute(query).fetchall()]
                    conn.rollback()
                except psycopg.Error as exc:
                    raise self.config.connection.error("planning the snapshot's chunks", exc) from None
        edges: list[list[str] | None] = [None, *bounds, None]
        return [Split(split_id=f"snapshot-{i}", state={"kind": "snapshot", "snapshot": self._snapshot,
                                                        "key": self.key_columns, "lower": edges[i],
                                                        "upper": edges[i + 1]})
                for i in range(len(edges) - 1)]

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
        if end.get("snapshot"):
            return
        self._release_snapshot()
        self._advance(offset_lsn(end))

    def _release_snapshot(self) -> None:
        if self._replication is not None:
            self._replication.close()
            self._replication = None
            self._snapshot = None

    def close(self) -> None:
        self._release_snapshot()
        if self._conn is not None:
            self._conn.close()
            self._conn = None
