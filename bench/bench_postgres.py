"""Throughput of the sparklink.postgres sinks against Spark's JDBC writer, and of async lookups.

Run: PYSPARK_PYTHON=.venv/bin/python .venv/bin/python bench/bench_postgres.py [--rows N] [--lookups N]

Starts a private PostgreSQL server (initdb on a free loopback port, as the test fixture does),
installs the PostgreSQL JDBC driver from Debian's libpostgresql-jdbc-java if
/usr/share/java/postgresql.jar is missing, and measures in one run, on the same cached
DataFrame:

* append: Spark's JDBC writer vs semantic=at-least-once (COPY) vs semantic=two-phase;
* upsert: semantic=upsert into an empty table and again over the same keys (Spark's JDBC
  writer cannot upsert; its append is the baseline);
* lookups: ordered_wait and unordered_wait with PostgresLookup vs a synchronous per-row lookup.

Prints rows/s and the ratio to the JDBC writer (or to the synchronous lookup).
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

JDBC_JAR = Path("/usr/share/java/postgresql.jar")
PASSWORD = "bench-Pa55"


def ensure_jdbc_driver() -> Path:
    if not JDBC_JAR.exists():
        subprocess.run(["apt-get", "update", "-q"], check=True, capture_output=True)
        subprocess.run(["apt-get", "install", "-y", "-q", "libpostgresql-jdbc-java"], check=True, capture_output=True)
    if not JDBC_JAR.exists():
        raise SystemExit(f"{JDBC_JAR} is still missing after installing libpostgresql-jdbc-java")
    return JDBC_JAR


class Server:
    """A throw-away PostgreSQL server (same settings as tests/conftest.py)."""

    def __init__(self) -> None:
        found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), reverse=True)
        if not found:
            raise SystemExit("PostgreSQL server binaries not found under /usr/lib/postgresql/*/bin")
        self.bin = Path(found[0]).parent
        self.root = Path(tempfile.mkdtemp(prefix="sparklink-bench-pg-"))
        self.run_as = ["runuser", "-u", "nobody", "--"] if os.geteuid() == 0 else []
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]

    def start(self) -> None:
        (self.root / "pw").write_text(PASSWORD)
        if self.run_as:
            subprocess.run(["chown", "-R", "nobody", str(self.root)], check=True)
        subprocess.run(self.run_as + [str(self.bin / "initdb"), "-D", str(self.root / "data"), "-U", "sparklink",
                                      "--pwfile", str(self.root / "pw"), "-A", "scram-sha-256", "-E", "UTF8",
                                      "--no-sync"], check=True, capture_output=True)
        options = (f"-c listen_addresses=127.0.0.1 -c port={self.port} -c unix_socket_directories={self.root} "
                   f"-c max_prepared_transactions=20 -c fsync=off -c max_connections=100")
        subprocess.run(self.run_as + [str(self.bin / "pg_ctl"), "-D", str(self.root / "data"), "-o", options,
                                      "-l", str(self.root / "server.log"), "-w", "-t", "60", "start"],
                       check=True, capture_output=True)

    def stop(self) -> None:
        subprocess.run(self.run_as + [str(self.bin / "pg_ctl"), "-D", str(self.root / "data"), "-m", "immediate",
                                      "-w", "stop"], capture_output=True)
        shutil.rmtree(self.root, ignore_errors=True)

    @property
    def dsn(self) -> str:
        return f"host=127.0.0.1 port={self.port} user=sparklink password={PASSWORD} dbname=postgres"

    @property
    def jdbc_url(self) -> str:
        return f"jdbc:postgresql://127.0.0.1:{self.port}/postgres"


def timed(label: str, rows: int, action: Callable[[], None]) -> float:
    started = time.perf_counter()
    action()
    seconds = time.perf_counter() - started
    rate = rows / seconds
    print(f"  {label:<44} {rows:>9} rows {seconds:8.2f} s {rate:>12,.0f} rows/s", flush=True)
    return rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=500_000)
    parser.add_argument("--lookups", type=int, default=20_000)
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    jar = ensure_jdbc_driver()
    server = Server()
    server.start()
    try:
        run(server, jar, args.rows, args.lookups)
    finally:
        server.stop()


def run(server: Server, jar: Path, rows: int, lookups: int) -> None:
    import psycopg
    import pyarrow as pa
    from pyspark.sql.types import StringType, StructField, StructType

    from sparklink.asyncio import ordered_wait, unordered_wait
    from sparklink.postgres.lookup import PostgresLookup
    from sparklink.testing import spark_session

    spark = spark_session(app_name="bench-postgres", extra={"spark.jars": str(jar), "spark.driver.memory": "2g"})
    frame = spark.range(0, rows, numPartitions=2).selectExpr(
        "id", "concat('name-', id) AS name", "id * 0.5 AS score", "current_timestamp() AS at").cache()
    frame.count()
    properties = {"user": "sparklink", "password": PASSWORD, "driver": "org.postgresql.Driver"}

    def ours(table: str, semantic: str, **extra: str) -> Callable[[], None]:
        def write() -> None:
            writer = (frame.write.format("sparklink.postgres").mode("append").option("dsn", server.dsn)
                      .option("table", table).option("semantic", semantic))
            for key, value in extra.items():
                writer = writer.option(key, value)
            writer.save()
        return write

    with psycopg.connect(server.dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE jdbc_append (id bigint, name text, score double precision, at timestamptz)")
        conn.execute("CREATE TABLE jdbc_warm (id bigint, name text, score double precision, at timestamptz)")
    frame.limit(1000).write.jdbc(server.jdbc_url, "jdbc_warm", mode="append", properties=properties)  # warm-up
    ours("warm", "at-least-once")()
    checkpoint = tempfile.mkdtemp(prefix="sparklink-bench-ck-")

    print(f"\nappend ({rows} rows, 2 partitions, local[2])")
    jdbc = timed("Spark JDBC writer (append)", rows,
                 lambda: frame.write.jdbc(server.jdbc_url, "jdbc_append", mode="append", properties=properties))
    append = timed("sparklink.postgres at-least-once (COPY)", rows, ours("sl_append", "at-least-once"))
    two_phase = timed("sparklink.postgres two-phase", rows,
                      ours("sl_2pc", "two-phase", checkpointLocation=checkpoint))
    print(f"\nupsert ({rows} rows)")
    upsert_new = timed("sparklink.postgres upsert, new keys", rows, ours("sl_upsert", "upsert", keyColumns="id"))
    upsert_old = timed("sparklink.postgres upsert, same keys again", rows, ours("sl_upsert", "upsert", keyColumns="id"))
    print("\nratios against Spark's JDBC writer (rows/s)")
    for label, rate in (("at-least-once", append), ("two-phase", two_phase), ("upsert new keys", upsert_new),
                        ("upsert same keys", upsert_old)):
        print(f"  {label:<20} {rate / jdbc:6.2f}x")

    with psycopg.connect(server.dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE customers (cid bigint PRIMARY KEY, name text)")
        conn.execute("INSERT INTO customers SELECT g, 'customer-' || g FROM generate_series(0, 9999) g")
    probe = spark.range(0, lookups, numPartitions=2).selectExpr("id % 12000 AS id").cache()
    probe.count()
    lookup = PostgresLookup(server.dsn, table="customers", keys={"cid": "id"}, columns=["name"], pool_size=8)
    out = StructType([StructField("name", StringType())])
    result_schema = StructType(probe.schema.fields + out.fields)

    def sync_rows(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        with psycopg.connect(server.dsn, autocommit=True) as conn:
            for batch in batches:
                ids = batch.column(0).to_pylist()
                names = [(lookup.sync_lookup(conn, {"id": i}) or {}).get("name") for i in ids]
                yield pa.RecordBatch.from_arrays([pa.array(ids, pa.int64()), pa.array(names, pa.string())],
                                                 names=["id", "name"])

    print(f"\nlookups ({lookups} rows, 2 partitions)")
    sync = timed("synchronous per-row lookup", lookups, lambda: probe.mapInArrow(sync_rows, result_schema).count())
    ordered = timed("ordered_wait (capacity 32, pool 8)", lookups,
                    lambda: ordered_wait(probe, lookup, out, capacity=32).count())
    unordered = timed("unordered_wait (capacity 32, pool 8)", lookups,
                      lambda: unordered_wait(probe, lookup, out, capacity=32).count())
    print(f"  ordered / sync {ordered / sync:6.2f}x   unordered / sync {unordered / sync:6.2f}x")
    spark.stop()
    shutil.rmtree(checkpoint, ignore_errors=True)


if __name__ == "__main__":
    main()
