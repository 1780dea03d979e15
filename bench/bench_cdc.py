"""Throughput of sparklink.postgres-cdc: changes/s from the slot, and the snapshot's rows/s.

Run: PYSPARK_PYTHON=.venv/bin/python .venv/bin/python bench/bench_cdc.py [--rows N] [--changes N]

Starts a private PostgreSQL server (wal_level=logical, as the test fixture does) and measures, on
two data shapes (``narrow``: id int, v text; ``wide``: id bigint, text, numeric(12,2),
timestamptz, double, boolean, date, jsonb):

* snapshot: ``--rows`` rows read by sparklink.postgres-cdc (startingPosition=snapshot,
  availableNow, into Spark's ``noop`` sink; chunks of rows/8, one batch) against the table
  source's parallel read (sparklink.postgres, partitionColumn=id, numPartitions=8, into ``noop``);
* changes: ``--changes`` updates (transactions of 1,000) read from the slot into ``noop``
  (availableNow, one batch) against the floor: the same log range decoded by the source's reader
  in this one process (the same SQL call, the same decoder, no Spark); and as many updates into
  ``sparklink.delta`` writeMode=upsert (sequenceColumn=_lsn) after a snapshot of the table.

* decoding: the column conversion of a batch (100,000 rows, 7 typed columns in PostgreSQL's text
  form): the reader's Arrow casts against converting value by value in Python (what the reader did
  before), checked equal.

Every figure is one run after a warm-up of the same query on a small table; on a loaded machine the
numbers move by tens of percent between runs.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import uuid

SHAPES = {
    "narrow": ("id int PRIMARY KEY, v text", "g, 'value-' || g"),
    "wide": ("id bigint PRIMARY KEY, v text, n numeric(12,2), at timestamptz, x double precision, ok boolean, "
             "day date, doc jsonb",
             "g, 'value-' || g, g * 1.25, timestamptz '2024-01-01 00:00+00' + g * interval '1 second', g / 7.0, "
             "g % 2 = 0, date '2024-01-01' + (g % 365), jsonb_build_object('k', g)"),
}


def rate(label: str, count: int, seconds: float, floor: float | None = None, floor_name: str = "the floor") -> float:
    per_second = count / seconds
    ratio = f"  ({per_second / floor:.2f}x {floor_name})" if floor else ""
    print(f"  {label:<44} {count:>9} in {seconds:6.2f} s = {per_second:>10,.0f}/s{ratio}", flush=True)
    return per_second




def conversion(rows: int = 100_000) -> None:
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import (
        BooleanType,
        DateType,
        DecimalType,
        DoubleType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    from sparklink.postgres.cdc_reader import CdcReader, _converter

    schema = StructType([StructField("id", LongType()), StructField("v", StringType()),
                         StructField("n", DecimalType(12, 2)), StructField("at", TimestampType()),
                         StructField("x", DoubleType()), StructField("ok", BooleanType()), StructField("day", DateType())])
    raw = {"id": [str(i).encode() for i in range(rows)], "v": [f"value-{i}".encode() for i in range(rows)],
           "n": [f"{i * 1.25:.2f}".encode() for i in range(rows)],
           "at": [f"2024-01-01 00:{i % 60:02d}:{i % 60:02d}.25+00".encode() for i in range(rows)],
           "x": [repr(i / 7).encode() for i in range(rows)], "ok": [b"t" if i % 2 else b"f" for i in range(rows)],
           "day": [f"2024-01-{i % 28 + 1:02d}".encode() for i in range(rows)]}
    reader = CdcReader.__new__(CdcReader)  # only _column is used: it needs the schema
    reader.schema = schema
    arrow = to_arrow_schema(schema, timezone="UTC")
    for _ in range(2):  # the second round counts (the first loads Arrow's kernels and time zone data)
        started = time.perf_counter()
        cast = [reader._column(f.name, raw[f.name], arrow.field(i).type) for i, f in enumerate(schema)]
        arrow_seconds = time.perf_counter() - started
        started = time.perf_counter()
        python = [pa.array([None if v is None else _converter(f.dataType, f.name)(v) for v in raw[f.name]],
                           type=arrow.field(i).type) for i, f in enumerate(schema)]
        python_seconds = time.perf_counter() - started
    assert all(a.equals(b) for a, b in zip(cast, python, strict=True))
    print("decoding: column conversion, 7 typed columns", flush=True)
    floor = rate("per value in Python (rows)", rows, python_seconds)
    rate("Arrow casts of whole columns (rows)", rows, arrow_seconds, floor, "per value")


def run_stream(spark, options: dict, checkpoint: str, delta: str | None = None) -> float:
    reader = spark.readStream.format("sparklink.postgres-cdc")
    for key, value in options.items():
        reader = reader.option(key, value)
    started = time.perf_counter()
    writer = reader.load().writeStream.option("checkpointLocation", checkpoint)
    if delta is None:
        writer = writer.format("noop")
    else:
        writer = (writer.format("sparklink.delta").option("path", delta).option("writeMode", "upsert")
                  .option("keyColumns", "id").option("opColumn", "_op").option("sequenceColumn", "_lsn"))
    query = writer.trigger(availableNow=True).start()
    query.awaitTermination()
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--changes", type=int, default=100_000)
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    import tempfile

    conversion()

    from sparklink.postgres.cdc_source import PostgresCdcSource
    from sparklink.source import READ_ALL
    from sparklink.testing import start_postgres
    from sparklink.testing.spark_session import spark_session

    server = start_postgres()
    spark = spark_session(master="local[2]", app_name="bench_cdc")
    work = tempfile.mkdtemp(prefix="bench-cdc-")
    try:
        with server.connect(autocommit=True) as conn:
            conn.execute("CREATE TABLE warm (id int PRIMARY KEY, v text)")
            conn.execute("INSERT INTO warm SELECT g, 'w' FROM generate_series(1, 1000) g")
        run_stream(spark, {"dsn": server.dsn, "table": "public.warm", "slotName": "warm", "publication": "warm_pub"},
                   f"{work}/warm")
        for shape, (columns, values) in SHAPES.items():
            print(f"{shape}: {columns}", flush=True)
            table = f"{shape}_{uuid.uuid4().hex[:6]}"
            with server.connect(autocommit=True) as conn:
                conn.execute(f"CREATE TABLE {table} ({columns})")
                conn.execute(f"INSERT INTO {table} SELECT {values} FROM generate_series(1, {args.rows}) g")
                conn.execute(f"VACUUM ANALYZE {table}")
            # the snapshot: sparklink.postgres-cdc vs the table source's parallel read
            snap = f"s_{table}"
            seconds = run_stream(spark, {"dsn": server.dsn, "table": f"public.{table}", "slotName": snap,
                                         "publication": f"{snap}_pub", "snapshotChunkRows": str(args.rows // 8)},
                                 f"{work}/{snap}")
            started = time.perf_counter()
            (spark.read.format("sparklink.postgres").option("dsn", server.dsn).option("table", table)
             .option("partitionColumn", "id").option("lowerBound", "1").option("upperBound", str(args.rows))
             .option("numPartitions", "8").load().write.format("noop").mode("overwrite").save())
            table_read = rate("table source, 8 partitions -> noop (rows)", args.rows, time.perf_counter() - started)
            rate("postgres-cdc snapshot, 8 chunks -> noop (rows)", args.rows, seconds, table_read, "the table source")
            # changes: a slot at "latest", then updates, then the same range three ways
            slot = f"c_{table}"
            options = {"dsn": server.dsn, "table": f"public.{table}", "slotName": slot, "publication": f"{slot}_pub",
                       "startingPosition": "latest"}
            source = PostgresCdcSource(options)
            source.schema()
            enumerator = source.create_enumerator(streaming=True)
            start = enumerator.initial_offset()
            with server.connect(autocommit=True) as conn:
                for low in range(1, args.changes + 1, 1000):
                    conn.execute(f"UPDATE {table} SET v = v || 'u' WHERE id BETWEEN %s AND %s",
                                 [low, min(low + 999, args.changes)])
            end = enumerator.latest_offset(start, READ_ALL)
            reader = source.create_reader(source.schema())
            started = time.perf_counter()
            decoded = sum(batch.num_rows for split in enumerator.plan_splits(start, end) for batch in reader.read(split))
            floor = rate("floor: the reader in one process (changes)", decoded, time.perf_counter() - started)
            reader.close()
            enumerator.close()
            seconds = run_stream(spark, options, f"{work}/{slot}")
            rate("postgres-cdc -> noop (changes)", decoded, seconds, floor)
            # the same changes again from a second slot created before them, into Delta upserts (a table
            # that holds the rows first: the snapshot of a slot created now, then the updates replayed)
            delta_slot = f"d_{table}"
            delta_options = dict(options, slotName=delta_slot, publication=f"{delta_slot}_pub",
                                 startingPosition="snapshot", snapshotChunkRows=str(args.rows // 8))
            run_stream(spark, delta_options, f"{work}/{delta_slot}", delta=f"{work}/{delta_slot}-table")
            with server.connect(autocommit=True) as conn:
                for low in range(1, args.changes + 1, 1000):
                    conn.execute(f"UPDATE {table} SET v = v || 'w' WHERE id BETWEEN %s AND %s",
                                 [low, min(low + 999, args.changes)])
            seconds = run_stream(spark, delta_options, f"{work}/{delta_slot}", delta=f"{work}/{delta_slot}-table")
            rate("postgres-cdc -> Delta upserts (changes)", args.changes, seconds, floor)
            with server.connect(autocommit=True) as conn:
                for name in (snap, slot, delta_slot):
                    conn.execute("SELECT pg_drop_replication_slot(%s)", [name])
    finally:
        spark.stop()
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
