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
