"""The table source: bounded range-partitioned reads, queries, types, and the streaming mode."""

from __future__ import annotations

import datetime as dt
import decimal
import uuid

import pytest
from pyspark.sql.types import LongType, StructField

from sparklink.errors import ConfigError
from sparklink.postgres.table_source import PostgresTableSource, RangePartitioning


@pytest.fixture
def typed_table(postgres):
    name = f'src "{uuid.uuid4().hex[:6]}"; x'  # a hostile name: quotes, space, semicolon
    quoted = '"' + name.replace('"', '""') + '"'
    with postgres.connect() as conn:
        conn.execute(f"CREATE TABLE {quoted} (id bigint, label text, price numeric(10,2), ok boolean, "
                     f"day date, at timestamptz, ntz timestamp, raw bytea, doc jsonb, \"Odd Col\" integer)")
        conn.execute(f"INSERT INTO {quoted} SELECT g, CASE WHEN g % 10 = 0 THEN NULL WHEN g % 10 = 1 THEN '' "
                     f"ELSE 'row ' || g || E' \"q\",\\n' END, g * 1.25, g % 2 = 0, date '2024-01-01' + g, "
                     f"timestamptz '2024-01-01 00:00:00+00' + g * interval '1 hour', "
                     f"timestamp '2024-01-01 12:00:00.5' + g * interval '1 minute', "
                     f"CASE WHEN g % 3 = 0 THEN NULL ELSE decode('00ff' || lpad(to_hex(g), 4, '0'), 'hex') END, "
                     f"jsonb_build_object('g', g), g FROM generate_series(0, 99) g")
        conn.execute(f"INSERT INTO {quoted} (id) VALUES (NULL)")
    return quoted


def _expected_row(g: int):
    return {"id": g, "label": None if g % 10 == 0 else ("" if g % 10 == 1 else f'row {g} "q",\n'),
            "price": decimal.Decimal(g) * decimal.Decimal("1.25"), "ok": g % 2 == 0,
            "day": dt.date(2024, 1, 1) + dt.timedelta(days=g),
            "at": dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(hours=g),
            "ntz": dt.datetime(2024, 1, 1, 12, 0, 0, 500000) + dt.timedelta(minutes=g),
            "raw": None if g % 3 == 0 else bytes.fromhex("00ff" + f"{g:04x}"),
            "doc": f'{{"g": {g}}}', "Odd Col": g}


@pytest.mark.parametrize("partitioned", [False, True], ids=["one-split", "range-partitioned"])
def test_bounded_read_of_every_type(spark, postgres, typed_table, partitioned):
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    reader = spark.read.format("sparklink.postgres").option("dsn", postgres.dsn).option("table", typed_table)
    if partitioned:
        reader = (reader.option("partitionColumn", "id").option("lowerBound", "10").option("upperBound", "90")
                  .option("numPartitions", "4"))
    frame = reader.load()
    assert frame.rdd.getNumPartitions() == (4 if partitioned else 1)
    rows = [r.asDict() for r in frame.collect()]
    by_id = {r["id"]: r for r in rows}
    assert len(rows) == 101 and None in by_id
    for g in (0, 1, 2, 3, 47, 99):
        got = dict(by_id[g])
        got["at"] = got["at"].replace(tzinfo=dt.timezone.utc)
        got["raw"] = bytes(got["raw"]) if got["raw"] is not None else None
        assert got == _expected_row(g)


def test_query_option(spark, postgres, typed_table):
    frame = (spark.read.format("sparklink.postgres").option("dsn", postgres.dsn)
             .option("query", f"SELECT id, id * 2 AS twice FROM {typed_table} WHERE id < 5").load())
    assert sorted((r.id, r.twice) for r in frame.collect()) == [(i, 2 * i) for i in range(5)]


def test_time_partitioning_boundaries():
    parts = RangePartitioning(column="at", lower="2024-01-01", upper="2024-01-05", num_partitions=4)
    from pyspark.sql.types import TimestampType
    assert parts.boundaries(StructField("at", TimestampType())) == [
        "2024-01-02 00:00:00", "2024-01-03 00:00:00", "2024-01-04 00:00:00"]
    assert RangePartitioning(column="id", lower="0", upper="10", num_partitions=3).boundaries(
        StructField("id", LongType())) == ["3", "6"]


@pytest.mark.parametrize(("options", "problem"), [
    ({"table": "t", "query": "SELECT 1"}, "exactly one of"),
    ({"table": "t", "partitionColumn": "id"}, "go together"),
    ({"table": "t", "numPartitions": "0", "partitionColumn": "id", "lowerBound": "0", "upperBound": "1"},
     "at least 1"),
    ({"table": "t", "bogus": "1"}, "unknown option"),
], ids=["table-and-query", "partial-partitioning", "zero-partitions", "unknown-option"])
def test_bad_source_options(postgres, options, problem):
    with pytest.raises(ConfigError, match=problem):
        PostgresTableSource({"dsn": postgres.dsn, **options})


def test_streaming_reads_new_rows_by_offset_column(spark, postgres, tmp_path):
    table = f"stream_{uuid.uuid4().hex[:8]}"
    with postgres.connect() as conn:
        conn.execute(f"CREATE TABLE {table} (seq bigint, v text)")
        conn.execute(f"INSERT INTO {table} SELECT g, 'v' || g FROM generate_series(1, 25) g")

    def run() -> None:
        query = (spark.readStream.format("sparklink.postgres").option("dsn", postgres.dsn).option("table", table)
                 .option("offsetColumn", "seq").option("maxRowsPerTrigger", "10").load()
                 .writeStream.format("parquet").option("path", str(tmp_path / "out"))
                 .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
        query.awaitTermination()

    run()
    with postgres.connect() as conn:
        conn.execute(f"INSERT INTO {table} SELECT g, 'v' || g FROM generate_series(26, 40) g")
    run()
    seqs = sorted(r.seq for r in spark.read.parquet(str(tmp_path / "out")).collect())
    assert seqs == list(range(1, 41))


def test_streaming_needs_offset_column(postgres):
    source = PostgresTableSource({"dsn": postgres.dsn, "table": "t"})
    with pytest.raises(ConfigError, match="offsetColumn"):
        source.create_enumerator(streaming=True)


@pytest.fixture
def victims(postgres):
    """A table with rows and a table that exists, for reads that try to change them."""
    suffix = uuid.uuid4().hex[:8]
    rows, other = f"victim_rows_{suffix}", f"victim_table_{suffix}"
    with postgres.connect() as conn:
        conn.execute(f"CREATE TABLE {rows} AS SELECT g AS id FROM generate_series(1, 5) g")
        conn.execute(f"CREATE TABLE {other} (id bigint)")
        conn.execute(f"CREATE SEQUENCE seq_{suffix}")
    yield rows, other, f"seq_{suffix}"


def _still_there(postgres, rows: str, other: str, sequence: str) -> None:
    with postgres.connect() as conn:
        assert conn.execute(f"SELECT count(*) FROM {rows}").fetchone()[0] == 5
        assert conn.execute("SELECT to_regclass(%s) IS NOT NULL", [other]).fetchone()[0]
        assert conn.execute(f"SELECT is_called FROM {sequence}").fetchone()[0] is False


@pytest.mark.parametrize(("query", "problem"), [
    ("SELECT 1 AS a) s; DELETE FROM {rows}; COMMIT; SELECT * FROM (SELECT 1 AS a", "not one valid statement"),
    ("SELECT 1 AS a) s; COMMIT; DROP TABLE {other}; COMMIT; SELECT * FROM (SELECT 1 AS a", "not one valid statement"),
    ("SELECT 1 AS a; DELETE FROM {rows}", "exactly one statement"),
    ("DELETE FROM {rows} RETURNING id", "describing the query"),
], ids=["delete-behind-closing-paren", "drop-behind-commit", "two-statements", "delete-returning"])
def test_a_query_that_would_write_is_refused_and_changes_nothing(postgres, victims, query, problem):
    rows, other, sequence = victims
    source = PostgresTableSource({"dsn": postgres.dsn, "query": query.format(rows=rows, other=other)})
    with pytest.raises(Exception, match=problem):
        source.schema()
    _still_there(postgres, rows, other, sequence)


def test_every_statement_of_a_read_runs_read_only(postgres, victims):
    """A single SELECT whose function writes (nextval) passes the one-statement check; the
    enumerator's offset query and the reader's COPY run read-only, so the server refuses it."""
    rows, other, sequence = victims
    options = {"dsn": postgres.dsn, "query": f"SELECT nextval('{sequence}') AS seq"}
    source = PostgresTableSource({**options, "offsetColumn": "seq"})
    enumerator = source.create_enumerator(streaming=True)
    try:
        with pytest.raises(Exception, match="read-only transaction"):
            enumerator.latest_offset(enumerator.initial_offset(), source.default_read_limit())
    finally:
        enumerator.close()
    bounded = PostgresTableSource(options)
    reader = bounded.create_reader(bounded.schema())
    split = bounded.create_enumerator(streaming=False).plan_splits({}, {})[0]
    try:
        with pytest.raises(Exception, match="read-only transaction"):
            list(reader.read(split))
    finally:
        reader.close()
    _still_there(postgres, rows, other, sequence)
