"""``sparklink.postgres-cdc`` without Spark: the pgoutput decoder on the server's own bytes, the
reader and enumerator driven directly (a replayed batch, a slot moved past the checkpoint, a
schema change mid-stream, TOASTed values, types)."""

from __future__ import annotations

import datetime as dt
import decimal
import uuid

import pytest

from sparklink.postgres import pgoutput
from sparklink.postgres.cdc_config import CdcError, offset
from sparklink.postgres.cdc_source import PostgresCdcSource
from sparklink.source import READ_ALL, ReadLimit


def _name() -> str:
    return "cdcl_" + uuid.uuid4().hex[:8]


@pytest.fixture
def stream(postgres):
    """A table with a few rows and a source on it (startingPosition=latest: no snapshot)."""
    table, slot = _name(), _name()
    with postgres.connect(autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table} (id bigint PRIMARY KEY, label text, price numeric(10,2), ok boolean, "
                     f"day date, at timestamptz, ntz timestamp, raw bytea, doc jsonb, tags int[], r real)")
    source = PostgresCdcSource({"dsn": postgres.dsn, "table": f"public.{table}", "slotName": slot,
                                "publication": f"{slot}_pub", "startingPosition": "latest"})
    source.schema()
    enumerator = source.create_enumerator(streaming=True)
    yield source, enumerator, table, slot
    enumerator.close()
    with postgres.connect(autocommit=True) as conn:
        conn.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = %s",
                     [slot])


def _read(source, start, end, enumerator=None):
    reader = source.create_reader(source.schema())
    planner = enumerator or source.create_enumerator(streaming=True)
    try:
        return [row for split in planner.plan_splits(start, end)
                for batch in reader.read(split) for row in batch.to_pylist()]
    finally:
        reader.close()
        if enumerator is None:
            planner.close()


def test_decoder_on_the_servers_bytes(postgres, stream):
    source, enumerator, table, slot = stream
    start = enumerator.initial_offset()
    with postgres.connect(autocommit=True) as conn:
        with conn.transaction():
            conn.execute(f"INSERT INTO {table} (id, label) VALUES (1, 'a'), (2, NULL)")
            conn.execute(f"UPDATE {table} SET label = 'b' WHERE id = 1")
            conn.execute(f"DELETE FROM {table} WHERE id = 2")
        raw = conn.execute("SELECT (lsn - '0/0'::pg_lsn)::bigint, data FROM pg_logical_slot_peek_binary_changes("
                           "%s, NULL, NULL, 'proto_version', '1', 'publication_names', %s)",
                           [slot, f"{slot}_pub"]).fetchall()
    messages = [pgoutput.decode(data) for _, data in raw]
    kinds = [type(m).__name__ for m in messages]
    assert kinds == ["Begin", "Relation", "Insert", "Insert", "Update", "Delete", "Commit"]
    begin, relation, first, _, update, delete, commit = messages
    assert isinstance(begin, pgoutput.Begin) and isinstance(commit, pgoutput.Commit)
    assert commit.end_lsn > commit.commit_lsn >= begin.final_lsn - 1 and begin.commit_ts == commit.commit_ts
    assert isinstance(relation, pgoutput.Relation)
    assert (relation.namespace, relation.name, relation.replica_identity) == ("public", table, "d")
    assert [c.name for c in relation.columns][:3] == ["id", "label", "price"]
    assert [c.is_key for c in relation.columns][:2] == [True, False]
    assert isinstance(first, pgoutput.Insert) and first.new[:2] == (b"1", b"a")
    assert isinstance(update, pgoutput.Update) and update.old is None and update.new[:2] == (b"1", b"b")
    assert isinstance(delete, pgoutput.Delete) and delete.old_is_key and delete.old[0] == b"2"
    assert delete.old[1] is None  # only the key travels with the default replica identity
    assert pgoutput.parse_lsn(pgoutput.format_lsn(commit.end_lsn)) == commit.end_lsn
    with pytest.raises(Exception, match="not part of protocol version 1"):
        pgoutput.decode(b"Z\x00")
    with pytest.raises(Exception, match="malformed pgoutput message"):
        pgoutput.decode(raw[0][1][:5])
    # the source's batch over the same range: rows of the table's types, with the change metadata
    end = enumerator.latest_offset(start, READ_ALL)
    assert end["lsn"] == commit.end_lsn  # the boundary is the commit record's END
    rows = _read(source, start, end)
    assert [(r["id"], r["label"], r["_op"]) for r in rows] == [(1, "a", "c"), (2, None, "c"), (1, "b", "u"),
                                                              (2, None, "d")]
    assert [r["_lsn"] for r in rows] == sorted(r["_lsn"] for r in rows)
    assert {r["_commit_ts"] for r in rows} == {begin.commit_ts}


def test_types_and_toasted_values(postgres, stream):
    source, enumerator, table, _ = stream
    start = enumerator.initial_offset()
    big = "".join(uuid.uuid4().hex for _ in range(3000))  # hardly compressible: stored out of line (TOAST)
    with postgres.connect(autocommit=True) as conn:
        conn.execute(f"INSERT INTO {table} VALUES (1, %s, 12.345, true, '2024-02-29', '2024-01-01 10:00:00.25+02', "
                     f"'2024-01-01 10:00:00.5', '\\x00ff10', '{{\"k\": [1, 2]}}', '{{1,2,3}}', 'NaN')", [big])
        conn.execute(f"UPDATE {table} SET ok = false WHERE id = 1")  # label unchanged: TOASTed, not in the WAL
        conn.execute(f"ALTER TABLE {table} REPLICA IDENTITY FULL")
        conn.execute(f"UPDATE {table} SET ok = true WHERE id = 1")  # the old row carries it now
    rows = _read(source, start, enumerator.latest_offset(start, READ_ALL))
    insert, toasted, full = rows
    assert insert["label"] == big and insert["price"] == decimal.Decimal("12.35") and insert["ok"] is True
    assert insert["day"] == dt.date(2024, 2, 29)
    assert insert["at"] == dt.datetime(2024, 1, 1, 8, 0, 0, 250000, tzinfo=dt.timezone.utc)
    assert insert["ntz"] == dt.datetime(2024, 1, 1, 10, 0, 0, 500000)
    assert insert["raw"] == b"\x00\xff\x10" and insert["doc"] == '{"k": [1, 2]}' and insert["tags"] == "{1,2,3}"
    assert insert["r"] != insert["r"]  # NaN
    assert toasted["_op"] == "u" and toasted["ok"] is False and toasted["label"] is None  # documented
    assert full["ok"] is True and full["label"] == big


def test_a_replayed_batch_reads_the_same_rows_and_the_slot_moves_only_on_commit(postgres, stream):
    source, enumerator, table, slot = stream
    start = enumerator.initial_offset()
    with postgres.connect(autocommit=True) as conn:
        for i in range(1, 7):
            conn.execute(f"INSERT INTO {table} (id, label) VALUES (%s, 'v')", [i])
    first_end = enumerator.latest_offset(start, ReadLimit(max_rows=8))  # about two transactions
    first = _read(source, start, first_end)
    assert 1 <= len(first) < 6
    # a crash before Spark commits: the batch is planned and read again from the same offsets
    assert _read(source, start, first_end) == first
    assert _position(postgres, slot) == start["lsn"]  # nothing committed: the slot did not move
    enumerator.commit(first_end)
    assert _position(postgres, slot) == first_end["lsn"]
    rest_end = enumerator.latest_offset(first_end, READ_ALL)
    rest = _read(source, first_end, rest_end)
    assert [r["id"] for r in first + rest] == [1, 2, 3, 4, 5, 6]  # nothing lost, nothing twice
    # replaying the committed batch after the slot moved past its start is refused, naming both positions
    enumerator.commit(rest_end)
    with pytest.raises(CdcError, match=f"slot '{slot}' is at {pgoutput.format_lsn(rest_end['lsn'])}, past the "
                                       f"batch's start {pgoutput.format_lsn(first_end['lsn'])}"):
        _read(source, first_end, rest_end)
    # a new run whose checkpoint is behind the slot refuses to start
    late = source.create_enumerator(streaming=True)
    with pytest.raises(CdcError, match=f"is at {pgoutput.format_lsn(rest_end['lsn'])}, past the checkpoint's offset "
                                       f"{pgoutput.format_lsn(first_end['lsn'])}"):
        late.latest_offset(offset(first_end["lsn"]), READ_ALL)
    late.close()


def test_a_schema_change_fails_the_batch_naming_table_and_column(postgres, stream):
    source, enumerator, table, _ = stream
    start = enumerator.initial_offset()
    with postgres.connect(autocommit=True) as conn:
        conn.execute(f"INSERT INTO {table} (id) VALUES (1)")
        conn.execute(f"ALTER TABLE {table} ADD COLUMN extra int")
        conn.execute(f"INSERT INTO {table} (id, extra) VALUES (2, 5)")
    end = enumerator.latest_offset(start, READ_ALL)
    with pytest.raises(CdcError, match=f"table public.{table} changed at .*: column 'extra' was added; .*Restart"):
        _read(source, start, end)


def _position(postgres, slot: str) -> int:
    with postgres.connect(autocommit=True) as conn:
        row = conn.execute("SELECT (confirmed_flush_lsn - '0/0'::pg_lsn)::bigint FROM pg_replication_slots "
                           "WHERE slot_name = %s", [slot]).fetchone()
    assert row is not None
    return row[0]


def test_lsn_is_a_sequence_per_key_even_inside_one_transaction(postgres, stream):
    """Two updates of one row in one transaction, a primary key changed by an update, a multi-row
    insert: ``_lsn`` orders each key's changes strictly, so the changelog contract (which refuses two
    changes of one key with one sequence value) reduces the batch to the table's state."""
    import pyarrow as pa

    from sparklink.sink.changelog import Changelog

    source, enumerator, table, _ = stream
    start = enumerator.initial_offset()
    with postgres.connect(autocommit=True) as conn:
        with conn.transaction():
            conn.execute(f"INSERT INTO {table} (id, label) SELECT g, 'i' FROM generate_series(1, 3) g")
            conn.execute(f"UPDATE {table} SET label = 'a' WHERE id = 1")
            conn.execute(f"UPDATE {table} SET label = 'b' WHERE id = 1")
            conn.execute(f"UPDATE {table} SET id = 7, label = 'moved' WHERE id = 2")  # the key changes
        with conn.cursor().copy(f"COPY {table} (id, label) FROM STDIN") as copy:  # one multi-insert record
            copy.write_row((10, "x"))
            copy.write_row((11, "y"))
    rows = _read(source, start, enumerator.latest_offset(start, READ_ALL))
    changes = [(r["id"], r["_op"], r["label"]) for r in rows]
    assert changes == [(1, "c", "i"), (2, "c", "i"), (3, "c", "i"), (1, "u", "a"), (1, "u", "b"),
                       (2, "d", None), (7, "c", "moved"), (10, "c", "x"), (11, "c", "y")]
    by_key: dict[int, list[int]] = {}
    for r in rows:
        by_key.setdefault(r["id"], []).append(r["_lsn"])
    assert all(lsns == sorted(set(lsns)) for lsns in by_key.values()), by_key  # strictly increasing per key
    changelog = Changelog(key_columns=("id",), op_column="_op", delete_values=("d",), sequence_column="_lsn")
    reduced = changelog.reduce(pa.Table.from_pylist(rows))
    assert sorted(reduced.upserts().column("id").to_pylist()) == [1, 3, 7, 10, 11]
    assert reduced.delete_keys().column("id").to_pylist() == [2]


def test_snapshot_in_chunks_resumes_after_a_crash_and_reconciles_with_the_log(postgres):
    """Two tables (``tables``) snapshotted in chunks of 10 rows, 30 rows per batch; the driver
    "crashes" (a new enumerator, as a restarted query has) after the first committed batch and
    again with a batch planned but not committed: finished chunks are not read again, the
    uncommitted batch is read again whole, and the changes made during the snapshot, replayed
    in ``_lsn`` order over the snapshot's rows, give both tables' state."""
    from sparklink.errors import ConfigError

    first, second, slot = _name(), _name(), _name()
    with postgres.connect(autocommit=True) as conn:
        for table in (first, second):
            conn.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, v text)")
            conn.execute(f"INSERT INTO {table} SELECT g, 'v' || g FROM generate_series(1, 45) g")
        conn.execute(f"CREATE TABLE {first}_other (id bigint PRIMARY KEY, v text)")
    options = {"dsn": postgres.dsn, "tables": f"public.{first}, public.{second}", "slotName": slot,
               "publication": f"{slot}_pub", "snapshotChunkRows": "10", "maxChangesPerTrigger": "30"}
    with pytest.raises(ConfigError, match=f"columns of public.{first}_other do not agree with those of "
                                          f"public.{first}: column 'id' integer there, bigint here"):
        PostgresCdcSource({**options, "tables": f"public.{first}, public.{first}_other"}).schema()
    limit = ReadLimit(max_rows=30)
    source = PostgresCdcSource(options)
    driver = source.create_enumerator(streaming=True)
    try:
        offsets = [driver.initial_offset()]
        offsets.append(driver.latest_offset(offsets[0], limit))
        rows = _read(source, offsets[0], offsets[1], driver)
        assert sorted(r["id"] for r in rows) == list(range(1, 31)) and {r["_op"] for r in rows} == {"r"}
        assert {len(driver.plan_splits(offsets[0], offsets[1]))} == {3}  # 3 chunks, 3 tasks
        driver.commit(offsets[1])
        with postgres.connect(autocommit=True) as conn:  # changes during the snapshot
            for table in (first, second):
                conn.execute(f"UPDATE {table} SET v = 'late' WHERE id IN (5, 40)")  # a read chunk, a chunk to come
                conn.execute(f"DELETE FROM {table} WHERE id = 41")
                conn.execute(f"INSERT INTO {table} VALUES (100, 'new')")
        driver.close()
        # the restarted driver goes on after the committed batch; its next batch is "lost" by a crash
        driver = PostgresCdcSource(options).create_enumerator(streaming=True)
        offsets.append(driver.latest_offset(offsets[1], limit))
        lost = _read(source, offsets[1], offsets[2], driver)
        driver.close()
        driver = PostgresCdcSource(options).create_enumerator(streaming=True)
        again = _read(source, offsets[1], offsets[2], driver)  # the replayed batch: the same offsets
        assert sorted(r["id"] for r in again) == sorted(r["id"] for r in lost)
        assert min(r["id"] for r in again) == 31 and {r["_table"] for r in again} == {f"public.{first}"}
        rows += again
        while "snapshot" in offsets[-1] or len(offsets) < 6:
            offsets.append(driver.latest_offset(offsets[-1], limit))
            rows += _read(source, offsets[-2], offsets[-1], driver)
            driver.commit(offsets[-1])
        assert "snapshot" not in offsets[-1]
        snapshot_rows = [r for r in rows if r["_op"] == "r"]
        assert len(snapshot_rows) == len({(r["_table"], r["id"]) for r in snapshot_rows})  # no chunk read twice
        assert _position(postgres, slot) == offsets[-1]["lsn"]
    finally:
        driver.close()
    state: dict[tuple[str, int], str] = {}
    for r in sorted(rows, key=lambda r: r["_lsn"]):  # snapshot rows (0) first, then the log in order
        if r["_op"] == "d":
            state.pop((r["_table"], r["id"]), None)
        else:
            state[(r["_table"], r["id"])] = r["v"]
    with postgres.connect(autocommit=True) as conn:
        expected = {(f"public.{t}", i): v for t in (first, second)
                    for i, v in conn.execute(f"SELECT id, v FROM {t}").fetchall()}
        conn.execute("SELECT pg_drop_replication_slot(%s)", [slot])
    assert state == expected
    assert sum(1 for r in rows if r["_op"] != "r") == 8  # every change once
