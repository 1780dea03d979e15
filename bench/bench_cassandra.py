"""Throughput of the sparklink.cassandra sink (upsert and write-ahead) against a plain Python-driver loop.

Run: PYSPARK_PYTHON=.venv/bin/python .venv/bin/python bench/bench_cassandra.py [--rows N] [--shapes simple,users]

Starts one private Cassandra node (sparklink.testing.cassandra, with the optimising JIT; the
jars come from ``make jvm``), has Spark write ``--rows`` rows of each data shape
(bench/bench_data.py) as Parquet in 2 files, and measures on the same machine:

* ``df.write`` of ``semantic=upsert``: 2 tasks, each with ``maxConcurrentRequests`` (32) INSERTs
  in flight;
* ``df.write`` of ``semantic=write-ahead``: the tasks stage Arrow segments in the checkpoint, the
  commit sends them from one process with 32 requests in flight;
* the floor: 2 processes with the Python driver (``cassandra-driver``), each reading one of the
  Parquet files with pyarrow and sending it with ``execute_concurrent_with_args`` (concurrency
  32): what the same client does with no Spark and no sink around it.
* changes (``writeMode=upsert``, ``keyColumns=id``, ``opColumn=op``): into a table already holding
  the ``--rows`` rows (loaded untimed), a changelog of 10 % of the keys (90 % updates ``u``, 10 %
  deletes ``d``) from 2 Parquet files, by both semantics; the floor sends the same changes with the
  Python driver (a prepared INSERT per update, a prepared DELETE per delete, concurrency 32). Each
  table is then counted (rows left = rows - deletes).

Every target is a new table ``(id bigint PRIMARY KEY, ...)`` of the shape's columns. Each writer
runs once on 1,000 rows first (warm-up). The DataStax Spark Cassandra Connector is not compared:
its newest build on Maven Central, com.datastax.spark:spark-cassandra-connector_2.13:3.5.1, is
built for Spark 3.5 and there is none for Spark 4.x, which sparklink runs on.
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_data import check_shapes, write_input  # noqa: E402

KEYSPACE = "bench"
CONCURRENCY = 32
CQL_COLUMNS = {"simple": "id bigint PRIMARY KEY, k text, v decimal, event_time timestamp",  # v: id * 0.5, a decimal
               "users": "id bigint PRIMARY KEY, k text, v double, amount decimal, event_time timestamp"}


def floor_worker(host: str, port: int, table: str, path: str, ready, go, done) -> None:
    """One process of the floor: connect and prepare, wait for the start, send one file's rows."""
    import pyarrow.parquet as pq
    from cassandra.cluster import Cluster
    from cassandra.concurrent import execute_concurrent, execute_concurrent_with_args

    data = pq.read_table(path)
    ops = data.column("op").to_pylist() if "op" in data.column_names else None  # a changelog (see the docstring)
    if ops is not None:
        data = data.drop_columns(["op"])
    rows = list(zip(*(data.column(name).to_pylist() for name in data.column_names), strict=True))
    cluster = Cluster([host], port=port)
    session = cluster.connect()
    names = ", ".join(data.column_names)
    prepared = session.prepare(f"INSERT INTO {KEYSPACE}.{table} ({names}) VALUES "
                               f"({', '.join('?' for _ in data.column_names)})")
    delete = session.prepare(f"DELETE FROM {KEYSPACE}.{table} WHERE id = ?")
    key = data.column_names.index("id")
    ready.put(True)
    go.wait()
    if ops is None:
        results = execute_concurrent_with_args(session, prepared, rows, concurrency=CONCURRENCY,
                                               raise_on_first_error=True)
    else:
        results = execute_concurrent(session, [(delete, (row[key],)) if op == "d" else (prepared, row)
                                               for row, op in zip(rows, ops, strict=True)],
                                     concurrency=CONCURRENCY, raise_on_first_error=True)
    for ok, result in results:
        if not ok:
            raise result
    done.put(len(rows))
    cluster.shutdown()


def run_floor(node, table: str, files: list[str]) -> float:
    """Seconds the floor's processes take to send every file (after they connected)."""
    context = multiprocessing.get_context("spawn")
    ready, done, go = context.Queue(), context.Queue(), context.Event()
    workers = [context.Process(target=floor_worker, args=(node.host, node.port, table, f, ready, go, done))
               for f in files]
    for worker in workers:
        worker.start()
    for _ in workers:
        ready.get(timeout=300)
    started = time.perf_counter()
    go.set()
    for _ in workers:
        done.get(timeout=1800)
    seconds = time.perf_counter() - started
    for worker in workers:
        worker.join()
        if worker.exitcode != 0:
            raise RuntimeError(f"a floor process failed (exit {worker.exitcode})")
    return seconds


def report(label: str, rows: int, seconds: float, floor: float | None) -> float:
    rate = rows / seconds
    ratio = f"{rate / floor:6.2f}x floor" if floor else ""
    print(f"  {label:<52} {rows:>9} rows {seconds:8.2f} s {rate:>10,.0f} rows/s {ratio}", flush=True)
    return rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=400_000)
    parser.add_argument("--shapes", default="simple,users")
    args = parser.parse_args()
    shapes = check_shapes(args.shapes)

    from sparklink.testing import spark_session
    from sparklink.testing.cassandra import start_cassandra

    node = start_cassandra(heap="1g", c1_only=False)
    try:
        node.execute(f"CREATE KEYSPACE {KEYSPACE} WITH replication = "
                     "{'class': 'SimpleStrategy', 'replication_factor': 1}")
        spark = spark_session(app_name="bench-cassandra", extra={"spark.driver.memory": "2g"})
        import sparklink

        sparklink.register(spark)
        root = Path(tempfile.mkdtemp(prefix="sparklink-bench-cassandra-"))
        tables = iter(range(1_000_000))

        def new_table(shape: str) -> str:
            name = f"t{next(tables)}"
            node.execute(f"CREATE TABLE {KEYSPACE}.{name} ({CQL_COLUMNS[shape]})")
            return name

        def sink_write(frame, shape: str, semantic: str, table: str | None = None, **changelog: str) -> float:
            table = table or new_table(shape)
            writer = (frame.write.format("sparklink.cassandra").mode("append").options(**node.options())
                      .option("keyspace", KEYSPACE).option("table", table).option("semantic", semantic)
                      .option("maxConcurrentRequests", CONCURRENCY).options(**changelog))
            if semantic == "write-ahead":
                writer = writer.option("checkpointLocation", str(root / f"ck-{table}"))
            started = time.perf_counter()
            writer.save()
            return time.perf_counter() - started

        def loaded_table(shape: str, frame) -> str:
            table = new_table(shape)
            sink_write(frame, shape, "upsert", table)
            return table

        def changes_case(shape: str, frame, path: Path) -> None:
            """writeMode=upsert: 10 % of the keys changed (a tenth of them deleted) into loaded tables."""
            from pyspark.sql import functions as F

            (frame.sample(fraction=0.1, seed=7).withColumn("op", F.when(F.rand(11) < 0.1, "d").otherwise("u"))
             .repartition(2, "id").write.parquet(str(path)))
            changes = spark.read.parquet(str(path))
            count, deletes = changes.count(), changes.where("op = 'd'").count()
            files = sorted(str(p) for p in path.glob("*.parquet"))
            print(f"\n{shape} changes: {count} changes ({deletes} deletes) into a table of {args.rows} rows")
            table = loaded_table(shape, frame)
            floor = report("plain cassandra-driver INSERT / DELETE, 2 processes (floor)", count,
                           run_floor(node, table, files), None)
            check(table, args.rows - deletes)
            for semantic in ("upsert", "write-ahead"):
                table = loaded_table(shape, frame)
                options = {"writeMode": "upsert", "keyColumns": "id", "opColumn": "op"}
                report(f"sparklink.cassandra writeMode=upsert semantic={semantic}", count,
                       sink_write(changes, shape, semantic, table, **options), floor)
                check(table, args.rows - deletes)

        def check(table: str, expected: int) -> None:
            cluster = node.cluster()
            try:
                session = cluster.connect()
                found = session.execute(f"SELECT count(*) FROM {KEYSPACE}.{table}", timeout=120).one()[0]
            finally:
                cluster.shutdown()
            if found != expected:
                raise AssertionError(f"table {table} holds {found} rows, expected {expected}")

        for shape in shapes:
            path = root / f"input-{shape}"
            write_input(spark, args.rows, path, shape, files=2)
            frame = spark.read.parquet(str(path))
            files = sorted(str(p) for p in path.glob("*.parquet"))
            for semantic in ("upsert", "write-ahead"):  # warm-up: Python workers, imports, prepared statements
                sink_write(frame.limit(1000), shape, semantic)
            print(f"\n{shape} ({args.rows} rows, 2 Parquet files -> 2 tasks, {CONCURRENCY} requests in flight each)")
            floor = report("plain cassandra-driver, 2 processes (floor)", args.rows,
                           run_floor(node, new_table(shape), files), None)
            report("sparklink.cassandra semantic=upsert", args.rows, sink_write(frame, shape, "upsert"), floor)
            report("sparklink.cassandra semantic=write-ahead", args.rows, sink_write(frame, shape, "write-ahead"),
                   floor)
            changes_case(shape, frame, root / f"changes-{shape}")

        print("\nSpark Cassandra Connector: not measured (no build for Spark 4.x on Maven Central; the newest, "
              "3.5.1, is for Spark 3.5)")
        spark.stop()
    finally:
        node.stop()


if __name__ == "__main__":
    main()
