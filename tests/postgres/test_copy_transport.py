"""COPY in and out of Arrow batches round-trips every supported value; the WAL file round-trips."""

from __future__ import annotations

import datetime as dt
import decimal
import uuid

import pyarrow as pa
from psycopg import sql

from sparklink.postgres.copy_transport import copy_in, copy_out
from sparklink.postgres.write_ahead_sink import read_wal_file

SCHEMA = pa.schema([("id", pa.int64()), ("s", pa.string()), ("f", pa.float64()), ("b", pa.bool_()),
                    ("d", pa.date32()), ("t", pa.timestamp("us", tz="UTC")), ("n", pa.decimal128(10, 3)),
                    ("raw", pa.binary())])
BATCH = pa.RecordBatch.from_pylist([
    {"id": 1, "s": "", "f": 1.5, "b": True, "d": dt.date(2024, 2, 29),
     "t": dt.datetime(2024, 1, 1, 1, 2, 3, 456789, tzinfo=dt.timezone.utc), "n": decimal.Decimal("-1.250"),
     "raw": b"\x00\xff,\"\n"},
    {"id": 2, "s": None, "f": None, "b": None, "d": None, "t": None, "n": None, "raw": None},
    {"id": 3, "s": 'a,"b"\n\\N c', "f": -0.0, "b": False, "d": dt.date(1, 1, 1),
     "t": dt.datetime(1999, 12, 31, 23, 59, 59, tzinfo=dt.timezone.utc), "n": decimal.Decimal("1234567.000"),
     "raw": b""},
], schema=SCHEMA)


def test_copy_round_trip(postgres):
    table = sql.Identifier(f"copy_{uuid.uuid4().hex[:8]}")
    with postgres.connect() as conn:
        conn.execute(sql.SQL("CREATE TABLE {} (id bigint, s text, f float8, b boolean, d date, t timestamptz, "
                             "n numeric(10,3), raw bytea)").format(table))
        assert copy_in(conn.cursor(), table, SCHEMA.names, [BATCH]) == 3
        query = sql.SQL("SELECT id, s, f, b, d, to_char(t AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US') || 'Z', "
                        "n, '\\x' || encode(raw, 'hex') FROM {} ORDER BY id").format(table)
        back = pa.Table.from_batches(list(copy_out(conn.cursor(), query, SCHEMA)), schema=SCHEMA)
    assert back.to_pylist() == BATCH.to_pylist()


def test_wal_file_round_trip(tmp_path):
    import pyarrow.ipc as ipc

    path = tmp_path / "00000-0-x.arrow"
    with open(path, "wb") as handle, ipc.new_stream(handle, SCHEMA) as writer:
        writer.write_batch(BATCH)
    assert [b.to_pylist() for b in read_wal_file(path)] == [BATCH.to_pylist()]


# Every type the binary COPY encodes, with NULLs, extremes and text that CSV would have to quote.
BINARY_DDL = ("a bigint, b integer, c smallint, d double precision, e real, f boolean, g text, h bytea, i date, "
              "j timestamptz, k timestamp, v varchar(20)")
BINARY_TYPES = ["int8", "int4", "int2", "float8", "float4", "bool", "text", "bytea", "date", "timestamptz",
                "timestamp", "varchar"]
UTC = dt.timezone.utc
BINARY_BATCH = pa.RecordBatch.from_arrays([
    pa.array([1, None, -3, 2**62, 5], pa.int64()),
    pa.array([1, 2, None, -2**31, 5], pa.int32()),
    pa.array([1, None, -128, 127, 5], pa.int8()),  # Spark's ByteType: a smallint column
    pa.array([1.5, None, float("inf"), -0.0, 1e300], pa.float64()),
    pa.array([1.5, None, 3, 4, 5], pa.float32()),
    pa.array([True, False, None, True, False]),
    pa.array(["a", None, "", "héllo ✓", 'tab\tnl\n"q",\\N']),
    pa.array([b"\x00\x01", None, b"", b"\xff", b"a"]),
    pa.array([dt.date(1970, 1, 1), None, dt.date(1, 1, 1), dt.date(9999, 12, 31), dt.date(1999, 12, 31)]),
    pa.array([dt.datetime(2024, 3, 1, 12, 0, 0, 123456, tzinfo=UTC), None, dt.datetime(1, 1, 1, tzinfo=UTC),
              dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
              dt.datetime(1969, 12, 31, 23, 59, 59, 1, tzinfo=UTC)], pa.timestamp("us", "Europe/Berlin")),
    pa.array([dt.datetime(2024, 3, 1, 12, 0, 0, 5000), None, dt.datetime(1, 1, 1), dt.datetime(1900, 1, 1),
              dt.datetime(2000, 1, 1)], pa.timestamp("ms")),
    pa.array(["x", "y", None, "", "z" * 20]),
], names=list("abcdefghijkv"))


def _copy_with_writer(conn, table, batch, column_types):
    from sparklink.postgres.copy_transport import CopyWriter

    writer = CopyWriter(conn.cursor(), table, batch.schema.names, column_types)
    writer.write(batch.slice(0, 2))
    writer.write(batch.slice(2))  # a slice: Arrow offsets that do not start at 0
    writer.finish()
    return writer.binary


def test_binary_copy_stores_what_csv_stores(postgres):
    """The binary COPY path and the CSV path leave identical rows, type by type."""
    via_csv, via_binary = (sql.Identifier(f"{kind}_{uuid.uuid4().hex[:8]}") for kind in ("csv", "bin"))
    with postgres.connect() as conn:
        for table in (via_csv, via_binary):
            conn.execute(sql.SQL("CREATE TABLE {} ({})").format(table, sql.SQL(BINARY_DDL)))
        copy_in(conn.cursor(), via_csv, BINARY_BATCH.schema.names, [BINARY_BATCH])
        assert _copy_with_writer(conn, via_binary, BINARY_BATCH, BINARY_TYPES)
        rows = [conn.execute(sql.SQL("SELECT * FROM {} ORDER BY a NULLS FIRST").format(t)).fetchall()
                for t in (via_csv, via_binary)]
    assert rows[0] == rows[1] and len(rows[0]) == 5


def test_copy_falls_back_to_csv_when_a_type_is_not_an_exact_match(postgres):
    """An Arrow int64 into an integer column (and numeric, and a domain) go as CSV, where
    PostgreSQL converts them; out-of-range values get PostgreSQL's own error."""
    import psycopg
    import pytest

    table = sql.Identifier(f"mixed_{uuid.uuid4().hex[:8]}")
    batch = pa.RecordBatch.from_pydict({"a": pa.array([1, 2], pa.int64()), "s": ["x", "y"]})
    with postgres.connect() as conn:
        conn.execute(sql.SQL("CREATE TABLE {} (a integer, s text)").format(table))
        assert not _copy_with_writer(conn, table, batch, ["int4", "text"])
        assert conn.execute(sql.SQL("SELECT a, s FROM {} ORDER BY a").format(table)).fetchall() == [(1, "x"), (2, "y")]
        conn.commit()
        too_big = pa.RecordBatch.from_pydict({"a": pa.array([2**40], pa.int64()), "s": ["z"]})
        with pytest.raises(psycopg.errors.NumericValueOutOfRange):
            _copy_with_writer(conn, table, too_big, ["int4", "text"])
        conn.rollback()
        over = pa.RecordBatch.from_pydict({"a": pa.array([7], pa.int32()), "s": ["far too long"]})
        conn.execute(sql.SQL("ALTER TABLE {} ALTER COLUMN s TYPE varchar(3)").format(table))
        with pytest.raises(psycopg.errors.StringDataRightTruncation):  # binary input checks varchar(n) too
            _copy_with_writer(conn, table, over, ["int4", "varchar"])
