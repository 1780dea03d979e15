"""Throughput of the sparklink.postgres sinks against Spark's JDBC writer, and of async lookups.

Run: PYSPARK_PYTHON=.venv/bin/python .venv/bin/python bench/bench_postgres.py [--rows N] [--repeat N] [--lookups N]

Starts a private PostgreSQL server (initdb on a free loopback port, as the test fixture does),
installs the PostgreSQL JDBC driver from Debian's libpostgresql-jdbc-java if
/usr/share/java/postgresql.jar is missing, and measures in one run, on the same cached
DataFrame:

* append: Spark's JDBC writer (default batchsize 1000, and batchsize 10000 with pgjdbc's
  reWriteBatchedInserts) vs semantic=at-least-once (COPY) vs semantic=two-phase, all into
  tables of the same shape;
* upsert: semantic=upsert into an empty table with PRIMARY KEY (id), then the same rows again
  (a replay: unchanged rows are left alone), then the same keys with new values; Spark's JDBC
  writer cannot upsert, so its appends (default and tuned) into a table with the same key are
  the baselines;
* lookups: ordered_wait and unordered_wait with PostgresLookup (batched, and per-row
  coroutines) vs a synchronous per-row lookup, on loopback and with a 2 ms server-side delay
  per query (a view with pg_sleep), which is where overlapping calls pays.

Every writer first runs once on 1,000 rows (warm-up), then ``--repeat`` times into new tables;
the best run counts. Prints rows/s and the ratios to the default and the tuned JDBC writer (or
to the synchronous lookup). The default of 1,000,000 rows keeps the fixed cost of a Spark job
(planning, task start, commit: about 0.2 s here) from dominating; at 200,000 rows it is a third
of the upsert's time.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

JDBC_JAR = Path("/usr/share/java/postgresql.jar")


def ensure_jdbc_driver() -> Path:
    if not JDBC_JAR.exists():
        subprocess.run(["apt-get", "update", "-q"], check=True, capture_output=True)
        subprocess.run(["apt-get", "install", "-y", "-q", "libpostgresql-jdbc-java"], check=True, capture_output=True)
    if not JDBC_JAR.exists():
        raise SystemExit(f"{JDBC_JAR} is still missing after installing libpostgresql-jdbc-java")
    return JDBC_JAR


def jdbc_url(server) -> str:
    return f"jdbc:postgresql://{server.host}:{server.port}/{server.dbname}"


def timed(label: str, rows: int, action: Callable[[], None]) -> float:
    started = time.perf_counter()
    action()
    seconds = time.perf_counter() - started
    rate = rows / seconds
    print(f"  {label:<44} {rows:>9} rows {seconds:8.2f} s {rate:>12,.0f} rows/s", flush=True)
    return rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=2, help="runs per writer; the best is kept")
    parser.add_argument("--lookups", type=int, default=20_000)
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    jar = ensure_jdbc_driver()
    from sparklink.testing import start_postgres

    server = start_postgres()
    try:
        run(server, jar, args.rows, args.lookups, args.repeat)
    finally:
        server.stop()


class PerRowLookup:
    """PostgresLookup without its batched entry point: one coroutine and one query per row
    (how ordered_wait / unordered_wait drive a plain async function)."""

    def __init__(self, lookup) -> None:
        self.lookup = lookup

    async def __call__(self, row):
        return await self.lookup(row)

    async def open(self) -> None:
        await self.lookup.open()

    async def close(self) -> None:
        await self.lookup.close()


TABLE_DDL = "CREATE TABLE {} (id bigint{}, name text, score double precision, at timestamptz)"


def run(server, jar: Path, rows: int, lookups: int, repeat: int) -> None:
    import psycopg
    import pyarrow as pa
    from pyspark.sql.types import StringType, StructField, StructType

    from sparklink.asyncio import ordered_wait, unordered_wait
    from sparklink.postgres.lookup import PostgresLookup
    from sparklink.testing import spark_session

    spark = spark_session(app_name="bench-postgres", extra={"spark.jars": str(jar), "spark.driver.memory": "2g"})
    frame = spark.range(0, rows, numPartitions=2).selectExpr(
        "id", "concat('name-', id) AS name", "CAST(id * 0.5 AS double) AS score", "current_timestamp() AS at").cache()
    frame.count()
    properties = {"user": server.user, "password": server.password, "driver": "org.postgresql.Driver"}
    tuned = dict(properties, batchsize="10000", reWriteBatchedInserts="true")

    def jdbc(table: str, props: dict[str, str]) -> Callable[[], None]:
        return lambda: frame.write.jdbc(jdbc_url(server), table, mode="append", properties=props)

    changed = frame.selectExpr("id", "name", "score + 1 AS score", "at").cache()  # same keys, new values
    changed.count()

    def ours(table: str, semantic: str, source=frame, **extra: str) -> Callable[[], None]:
        def write() -> None:
            writer = (source.write.format("sparklink.postgres").mode("append").option("dsn", server.dsn)
                      .option("table", table).option("semantic", semantic))
            for key, value in extra.items():
                writer = writer.option(key, value)
            writer.save()
        return write

    # every target has the same shape; the upsert baseline is JDBC appending into a table with
    # the same primary key (JDBC cannot upsert). Each repetition writes into new tables.
    def new_table(name: str, keyed: bool) -> str:
        with psycopg.connect(server.dsn, autocommit=True) as conn:
            conn.execute(f"DROP TABLE IF EXISTS {name}")
            conn.execute(TABLE_DDL.format(name, " PRIMARY KEY" if keyed else ""))
        return name

    checkpoint = tempfile.mkdtemp(prefix="sparklink-bench-ck-")
    # warm-up: every writer once on a few rows (JVM classes, Python workers, imports)
    small = frame.limit(1000)
    small.write.jdbc(jdbc_url(server), new_table("warm_jdbc", False), mode="append", properties=properties)
    for semantic, keyed, extra in (("at-least-once", False, {}), ("two-phase", False, {"checkpointLocation": checkpoint}),
                                   ("upsert", True, {"keyColumns": "id"})):
        ours(new_table("warm_" + semantic.replace("-", "_"), keyed), semantic, source=small, **extra)()

    def best(label: str, action: Callable[[int], Callable[[], None]]) -> float:
        """The best rate of ``repeat`` runs; ``action(i)`` builds run i's write (new tables)."""
        rates = [timed(label, rows, action(i)) for i in range(repeat)]
        return max(rates)

    print(f"\nappend ({rows} rows, 2 partitions, local[2]; same table shape, no key; best of {repeat})")
    jdbc_default = best("Spark JDBC writer, batchsize 1000 (default)",
                        lambda i: jdbc(new_table(f"jdbc_default_{i}", False), properties))
    jdbc_tuned = best("Spark JDBC writer, batchsize 10000 + rewrite",
                      lambda i: jdbc(new_table(f"jdbc_tuned_{i}", False), tuned))
    append = best("sparklink.postgres at-least-once (COPY)",
                  lambda i: ours(new_table(f"sl_append_{i}", False), "at-least-once"))
    two_phase = best("sparklink.postgres two-phase",
                     lambda i: ours(new_table(f"sl_2pc_{i}", False), "two-phase", checkpointLocation=checkpoint))
    print(f"\nupsert ({rows} rows into a table with PRIMARY KEY (id); best of {repeat})")
    jdbc_pk_default = best("Spark JDBC writer into the keyed table (default)",
                           lambda i: jdbc(new_table(f"jdbc_pk_default_{i}", True), properties))
    jdbc_pk = best("Spark JDBC writer into the keyed table (tuned)", lambda i: jdbc(new_table(f"jdbc_pk_{i}", True), tuned))
    upsert_rates: dict[str, list[float]] = {"new": [], "same": [], "changed": []}
    for i in range(repeat):
        table = new_table(f"sl_upsert_{i}", True)
        upsert_rates["new"].append(timed("sparklink.postgres upsert, new keys", rows,
                                         ours(table, "upsert", keyColumns="id")))
        upsert_rates["same"].append(timed("sparklink.postgres upsert, same rows again (replay)", rows,
                                          ours(table, "upsert", keyColumns="id")))
        upsert_rates["changed"].append(timed("sparklink.postgres upsert, same keys, new values", rows,
                                             ours(table, "upsert", source=changed, keyColumns="id")))
    upsert_new, upsert_same, upsert_changed = (max(upsert_rates[k]) for k in ("new", "same", "changed"))
    print("\nratios (best rows/s) to Spark's JDBC writer, default | tuned, into the same kind of table "
          "(upserts: the keyed one; JDBC cannot upsert, so it appends the same rows)")
    for label, rate, default_base, tuned_base in (
            ("at-least-once", append, jdbc_default, jdbc_tuned), ("two-phase", two_phase, jdbc_default, jdbc_tuned),
            ("upsert new keys", upsert_new, jdbc_pk_default, jdbc_pk),
            ("upsert replay", upsert_same, jdbc_pk_default, jdbc_pk),
            ("upsert new values", upsert_changed, jdbc_pk_default, jdbc_pk)):
        print(f"  {label:<20} {rate / default_base:6.2f}x | {rate / tuned_base:6.2f}x")
    print(f"  (upserts against the default JDBC writer into the table without a key: "
          f"{upsert_new / jdbc_default:.2f}x, {upsert_same / jdbc_default:.2f}x, {upsert_changed / jdbc_default:.2f}x)")

    with psycopg.connect(server.dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE customers (cid bigint PRIMARY KEY, name text)")
        conn.execute("INSERT INTO customers SELECT g, 'customer-' || g FROM generate_series(0, 9999) g")
        # the same table behind a 2 ms server-side delay per query (not per row): latency to overlap
        conn.execute("CREATE VIEW customers_slow AS WITH delay AS MATERIALIZED (SELECT pg_sleep(0.002)) "
                     "SELECT c.cid, c.name FROM customers c, delay")
    out = StructType([StructField("name", StringType())])

    def lookup_suite(title: str, table: str, count: int) -> None:
        probe = spark.range(0, count, numPartitions=2).selectExpr("id % 12000 AS id").cache()
        probe.count()
        result_schema = StructType(probe.schema.fields + out.fields)
        lookup = PostgresLookup(server.dsn, table=table, keys={"cid": "id"}, columns=["name"], pool_size=8)

        def sync_rows(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            with psycopg.connect(server.dsn, autocommit=True) as conn:
                for batch in batches:
                    ids = batch.column(0).to_pylist()
                    names = [(lookup.sync_lookup(conn, {"id": i}) or {}).get("name") for i in ids]
                    yield pa.RecordBatch.from_arrays([pa.array(ids, pa.int64()), pa.array(names, pa.string())],
                                                     names=["id", "name"])

        print(f"\nlookups, {title} ({count} rows, 2 partitions)")
        sync = timed("synchronous per-row lookup", count, lambda: probe.mapInArrow(sync_rows, result_schema).count())
        rates = [
            ("ordered_wait, per-row coroutines (capacity 32)", timed(
                "ordered_wait, per-row coroutines (capacity 32)", count,
                lambda: ordered_wait(probe, PerRowLookup(lookup), out, capacity=32).count())),
            ("ordered_wait, batched (capacity 512, pool 8)", timed(
                "ordered_wait, batched (capacity 512, pool 8)", count,
                lambda: ordered_wait(probe, lookup, out, capacity=512).count())),
            ("unordered_wait, batched (capacity 512, pool 8)", timed(
                "unordered_wait, batched (capacity 512, pool 8)", count,
                lambda: unordered_wait(probe, lookup, out, capacity=512).count())),
        ]
        for label, rate in rates:
            print(f"  {label:<48} {rate / sync:6.2f}x the synchronous lookup")
        probe.unpersist()

    lookup_suite("loopback", "customers", lookups)
    lookup_suite("2 ms server-side delay per query", "customers_slow", max(1000, lookups // 4))
    spark.stop()
    shutil.rmtree(checkpoint, ignore_errors=True)


if __name__ == "__main__":
    main()
