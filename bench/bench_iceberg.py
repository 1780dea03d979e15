"""Benchmark: the ``sparklink.iceberg`` sink and source against the Iceberg Spark runtime (the
peer) and pyiceberg alone.

    PYSPARK_PYTHON=.venv/bin/python .venv/bin/python bench/bench_iceberg.py                  # 1,000,000 rows
    PYSPARK_PYTHON=.venv/bin/python .venv/bin/python bench/bench_iceberg.py --rows 200000 --repeat 1

Rows of one shape of bench_data.py (``--shape``, ``simple`` by default), written once as Parquet (``--files`` files)
before anything is timed; a sqlite SQL catalog with a local warehouse under a temporary folder;
one untimed query into the sink and one out of the source warm the session up. Best of ``--repeat``:

  sink       ``readStream.parquet`` -> ``sparklink.iceberg`` (a new table; one availableNow
             micro-batch: planning, tasks, the commit), ``start()`` to the end of ``awaitTermination()``
  sink-floor the sink's floor: the same query into a Python streaming sink that only iterates the
             Arrow batches it is handed (``bench_file_sink.DiscardFloor``): Spark's read of the
             input and the hand-over to Python, before any sink encodes a byte
  append     the same rows as one Arrow table in this process -> pyiceberg ``table.append`` (a new
             table; the library's own limit without Spark; reading the input not timed)
  source     a table of ``--files`` pyiceberg appends -> ``readStream.format("sparklink.iceberg")`` ->
             the ``noop`` sink (one availableNow micro-batch)
  scan       the same table -> pyiceberg ``table.scan().to_arrow()`` in this process
  floor      the same rows (the table's scan, untimed, in an Arrow IPC file) -> a Python streaming
             data source that yields them from memory -> ``noop`` (one availableNow micro-batch):
             what any Python streaming source pays per query and to hand these rows to Spark,
             before it opens a catalog. PySpark plans a streaming Python source in a Python process
             it starts for that query, so the source's imports are paid in every query: ``start``
             times them in a fresh process (after PySpark's own imports, as that process has them):
             the libraries (pyiceberg's SQL catalog, SQLAlchemy) and then sparklink (its import,
             the catalog and the table), printed beside the ratio. The micro-batches alone
             (``durationMs.triggerExecution``: what a running stream pays per micro-batch, the
             query's start left out) are printed too, for the source, the floor and the runtime.
  pyiceberg  the same table -> ``bench.pyiceberg`` (bench/library_sources.py): the most direct
             Python streaming source on pyiceberg, no sparklink code (its planning loads the catalog
             and the table and calls ``plan_files``; two tasks decode the data files with pyarrow)
             -> ``noop``: what pyiceberg and the hand-over cost a Python Iceberg source
  spark-sink / spark-source   the peer, the Iceberg Spark runtime (1.12.0, in its own driver
             process on PySpark 4.1.4, the newest Spark it serves: see sparklink.testing.peers):
             ``readStream.parquet`` -> ``writeStream.toTable`` and ``readStream.table`` -> ``noop``,
             one availableNow micro-batch each, after an untimed warm-up query of each in that
             process; the same SQLite catalog (Iceberg's JdbcCatalog) and warehouse

The data files and bytes each case's table holds are printed beside the times, and the load
average: on a shared machine the ratios are the meaningful numbers.

``--upsert`` runs the ``writeMode=upsert`` case instead (no Spark, one process):

    .venv/bin/python bench/bench_iceberg.py --upsert --keys 1000000 --batches 2

  a table of ``--keys`` rows (``id, v, seq``) written by pyiceberg's ``append``, then
  ``--batches`` batches each changing ``--fraction`` of the keys (random keys, 5 % of them new)
  merged by the sink's commit path (:func:`sparklink.iceberg.merge.merge_with_retries`: reduce,
  plan, read, merge, write, commit; the time split into scan / merge / write / commit), against
  the same batches into a copy of the table with pyiceberg's ``table.upsert(df, join_cols=["id"])``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_data  # noqa: E402
from bench_file_sink import DiscardFloor  # noqa: E402
from bench_file_source import streaming_floor_frame, time_streaming_floor  # noqa: E402
from library_sources import library_source_frame  # noqa: E402
from query_times import Best, QueryTimes, run_available_now  # noqa: E402

CATALOG = "bench_catalog"  # pyiceberg's catalog name (catalog.name), also the Spark catalog of the peer


def write_input(path: Path, rows: int, files: int, shape: str) -> list[pa.Table]:
    path.mkdir(parents=True)
    parts = []
    per_file = rows // files
    for number in range(files):
        first = number * per_file
        count = per_file if number < files - 1 else rows - first
        table = bench_data.make_table(shape, count, first_id=first, seed=number)
        pq.write_table(table, path / f"input-{number:03d}.parquet")
        parts.append(table)
    return parts


def row_groups(options: dict[str, str]) -> int:
    files = load(options)[1].inspect.files()
    return sum(pq.ParquetFile(path.removeprefix("file://")).metadata.num_row_groups
               for path in files.column("file_path").to_pylist())


def peer_times(source: Path, schema: str, work: Path, read_table: dict[str, str], rows: int,
               repeat: int, best: Best) -> dict[str, str]:
    """The Iceberg Spark runtime's best times (``spark-sink``, ``spark-source``; whole queries and
    micro-batches) into ``best``, each after an untimed warm-up query, in one peer process; returns
    the options of the last table its sink made."""
    from sparklink.testing.peers import iceberg_conf, run_peer

    read_root = Path(read_table["catalog.uri"].removeprefix("sqlite:///")).parent
    steps, names = [{"op": "sql", "query": f"CREATE NAMESPACE IF NOT EXISTS {CATALOG}.bench"}], []
    parquet = {"format": "parquet", "path": str(source), "schema": schema}
    for run in range(repeat + 1):  # its tables go to the catalog of the source's table (one Spark catalog)
        steps.append({"op": "stream", "source": parquet, "checkpoint": str(work / f"ck-peer-sink-{run}"),
                      "sink": {"table": f"{CATALOG}.bench.peer_{run}"}})
        names.append("spark-sink" if run else "warm")
    for run in range(repeat + 1):
        steps.append({"op": "stream", "source": {"table": f"{CATALOG}.{read_table['table']}"},
                      "sink": {"format": "noop"}, "checkpoint": str(work / f"ck-peer-source-{run}")})
        names.append("spark-source" if run else "warm")
    conf = iceberg_conf(CATALOG, read_root / "catalog.db", read_table["catalog.warehouse"])
    values = run_peer("spark-iceberg", conf, steps, short_lived=False).values[1:]
    for name, value in zip(names, values, strict=True):
        assert value["rows"] == rows, (name, value)
        if name != "warm":
            best.add(name, value["seconds"], value["batch_seconds"])
    return dict(read_table, table=f"bench.peer_{repeat}")


def catalog_options(root: Path, table: str) -> dict[str, str]:
    root.mkdir(parents=True, exist_ok=True)
    return {"table": table, "catalog.name": CATALOG, "catalog.type": "sql", "catalog.uri": f"sqlite:///{root}/catalog.db",
            "catalog.warehouse": f"file://{root}/warehouse"}


def catalog_properties(options: dict[str, str]) -> dict[str, str]:
    return {k[8:]: v for k, v in options.items() if k.startswith("catalog.") and k != "catalog.name"}


def load(options: dict[str, str]):
    from pyiceberg.catalog import load_catalog

    catalog = load_catalog(CATALOG, **catalog_properties(options))
    return catalog, catalog.load_table(options["table"])


def files_and_bytes(options: dict[str, str]) -> tuple[int, int]:
    files = load(options)[1].inspect.files()
    return files.num_rows, sum(files.column("file_size_in_bytes").to_pylist())


def time_sink(spark, source: Path, options: dict[str, str], checkpoint: Path) -> QueryTimes:
    frame = spark.readStream.schema(spark.read.parquet(str(source)).schema).parquet(str(source))
    return run_available_now(frame.writeStream.format("sparklink.iceberg").options(**options)
                             .option("checkpointLocation", str(checkpoint)))


def time_sink_floor(spark, source: Path, checkpoint: Path) -> QueryTimes:
    """The sink's floor: the same query into a Python streaming sink that only iterates the Arrow
    batches it is handed (``bench_file_sink.DiscardFloor``): Spark's read of the input and the
    hand-over to Python, which every Python sink pays before it encodes a byte."""
    DiscardFloor.register(spark)
    frame = spark.readStream.schema(spark.read.parquet(str(source)).schema).parquet(str(source))
    return run_available_now(frame.writeStream.format("bench.discard").option("checkpointLocation", str(checkpoint)))


def time_append(parts: list[pa.Table], options: dict[str, str]) -> float:
    from pyiceberg.catalog import load_catalog

    catalog = load_catalog(CATALOG, **catalog_properties(options))
    catalog.create_namespace_if_not_exists("bench")
    data = pa.concat_tables(parts)
    start = time.perf_counter()
    table = catalog.create_table(options["table"], schema=data.schema)
    table.append(data)
    return time.perf_counter() - start


def make_source_table(parts: list[pa.Table], options: dict[str, str]) -> None:
    from pyiceberg.catalog import load_catalog

    catalog = load_catalog(CATALOG, **catalog_properties(options))
    catalog.create_namespace_if_not_exists("bench")
    table = catalog.create_table(options["table"], schema=parts[0].schema)
    for part in parts:
        table.append(part)


def time_source(spark, options: dict[str, str], checkpoint: Path) -> QueryTimes:
    frame = spark.readStream.format("sparklink.iceberg").options(**options).load()
    times = run_available_now(frame.writeStream.format("noop").option("checkpointLocation", str(checkpoint)))
    assert times.rows == load(options)[1].scan().to_arrow().num_rows, times.rows
    return times


FRESH_START = """
import json, sys, time
import pyspark.sql.streaming.python_streaming_source_runner  # what PySpark's planning process has imported
started = time.perf_counter()
import pyiceberg.catalog.sql  # what planning imports of pyiceberg (with SQLAlchemy)
libraries = time.perf_counter() - started
from sparklink.iceberg.source import IcebergSource
IcebergSource(json.loads(sys.argv[1]))
print(json.dumps({"libraries": libraries, "total": time.perf_counter() - started}))
"""


def fresh_start(options: dict[str, str]) -> dict[str, float]:
    """Seconds a fresh Python process spends importing pyiceberg's SQL catalog (and SQLAlchemy)
    and then starting sparklink's source (its import, the catalog, the table)."""
    import json
    import subprocess

    src = Path(__file__).resolve().parent.parent / "src"
    done = subprocess.run([sys.executable, "-c", FRESH_START, json.dumps(options)], capture_output=True, text=True,
                          check=True, env=dict(os.environ, PYTHONPATH=str(src)))
    return json.loads(done.stdout.strip().splitlines()[-1])


def time_scan(options: dict[str, str]) -> float:
    start = time.perf_counter()
    rows = load(options)[1].scan().to_arrow().num_rows
    seconds = time.perf_counter() - start
    assert rows > 0
    return seconds


def upsert_case(keys: int, batches: int, fraction: float) -> None:
    """The ``--upsert`` case (see the module's docstring)."""
    import random

    from sparklink.iceberg.merge import merge_with_retries
    from sparklink.sink.changelog import Changelog

    work = Path(tempfile.mkdtemp(prefix="bench-iceberg-upsert-"))
    try:
        ours, theirs = catalog_options(work / "ours", "bench.state"), catalog_options(work / "theirs", "bench.state")
        initial = pa.table({"id": pa.array(range(keys), pa.int64()), "v": [f"v{i}" for i in range(keys)],
                            "seq": pa.array([0] * keys, pa.int64())})
        from pyiceberg.catalog import load_catalog

        for options in (ours, theirs):
            catalog = load_catalog(CATALOG, **catalog_properties(options))
            catalog.create_namespace_if_not_exists("bench")
            table = catalog.create_table("bench.state", schema=initial.schema)
            table.append(initial)
        changelog = Changelog(key_columns=("id",), sequence_column="seq")
        rng = random.Random(1)
        count = int(keys * fraction)
        totals = {"ours": 0.0, "pyiceberg": 0.0}
        parts: dict[str, float] = {}
        for batch in range(1, batches + 1):
            new = count // 20
            ids = rng.sample(range(keys), count - new) + list(range(keys + (batch - 1) * new, keys + batch * new))
            changes = pa.table({"id": pa.array(ids, pa.int64()), "v": [f"b{batch}-{i}" for i in ids],
                                "seq": pa.array([batch] * len(ids), pa.int64())})
            start = time.perf_counter()
            stats = merge_with_retries(lambda: load(ours)[1], changelog.reduce(changes), summary={"batch": str(batch)},
                                       branch="main", already_committed=lambda _t: False, owner_tag="0bec0bec")
            totals["ours"] += time.perf_counter() - start
            assert stats is not None
            for name, seconds in stats.seconds.items():
                parts[name] = parts.get(name, 0.0) + seconds
            start = time.perf_counter()
            load(theirs)[1].upsert(changes, join_cols=["id"])
            totals["pyiceberg"] += time.perf_counter() - start
        a = load(ours)[1].scan().to_arrow().sort_by("id")
        b = load(theirs)[1].scan().to_arrow().sort_by("id")
        assert a.num_rows == b.num_rows and a.column("v").to_pylist() == b.column("v").to_pylist(), "tables differ"
        loadavg = os.getloadavg()
        changed = count * batches
        print(f"keys={keys} batches={batches} changes per batch={count} load average {loadavg[0]:.2f}")
        for name, seconds in totals.items():
            print(f"{name:10s} {seconds:7.2f} s  {changed / seconds:10,.0f} changes/s")
        print("ours, where the time goes: " + ", ".join(f"{k} {v:.2f} s" for k, v in parts.items()) +
              f", commit and the rest {totals['ours'] - sum(parts.values()):.2f} s")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--upsert", action="store_true", help="the writeMode=upsert case only (no Spark)")
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--batches", type=int, default=2)
    parser.add_argument("--fraction", type=float, default=0.1)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--shape", choices=bench_data.SHAPES, default="simple")
    parser.add_argument("--no-peer", action="store_true", help="skip the Iceberg Spark runtime")
    args = parser.parse_args()
    if args.upsert:
        upsert_case(args.keys, args.batches, args.fraction)
        return

    import sparklink
    from sparklink.testing.spark_session import spark_session

    work = Path(tempfile.mkdtemp(prefix="bench-iceberg-"))
    try:
        source = work / "in"
        parts = write_input(source, args.rows, args.files, args.shape)
        schema = bench_data.SCHEMAS[args.shape] if args.shape == "users" else "id long, name string, score double"
        spark = spark_session("local[2]", "bench-iceberg")
        sparklink.register(spark)
        time_sink(spark, source, catalog_options(work / "warm", "bench.warm"), work / "ck-warm")  # untimed warm-up
        read_table = catalog_options(work / "read", "bench.read")
        make_source_table(parts, read_table)
        time_source(spark, read_table, work / "ck-source-warm")  # untimed warm-up of the source's workers
        floor = streaming_floor_frame(spark, load(read_table)[1].scan().to_arrow(), work / "floor.arrow", schema)
        time_streaming_floor(floor, work / "ck-floor-warm", args.rows)  # untimed warm-up
        library = library_source_frame(spark, "pyiceberg", read_table, schema)
        time_streaming_floor(library, work / "ck-library-warm", args.rows)  # untimed warm-up
        time_sink_floor(spark, source, work / "ck-sink-floor-warm")  # untimed warm-up
        timed = Best()
        tables: dict[str, dict[str, str]] = {"source": read_table, "scan": read_table}
        for run in range(args.repeat):
            sink_options = catalog_options(work / f"sink-{run}", "bench.events")
            append_options = catalog_options(work / f"append-{run}", "bench.events")
            cases = {  # called right away, in this iteration
                "sink": lambda o=sink_options, r=run: time_sink(spark, source, o, work / f"ck-sink-{r}"),
                "sink-floor": lambda r=run: time_sink_floor(spark, source, work / f"ck-sink-floor-{r}"),
                "append": lambda o=append_options: time_append(parts, o),
                "source": lambda r=run: time_source(spark, read_table, work / f"ck-source-{r}"),
                "scan": lambda: time_scan(read_table),
                "floor": lambda r=run: time_streaming_floor(floor, work / f"ck-floor-{r}", args.rows),
                "pyiceberg": lambda r=run: time_streaming_floor(library, work / f"ck-library-{r}", args.rows),
            }
            tables["sink"], tables["append"] = sink_options, append_options
            for name, case in cases.items():
                timed.record(name, case())
        if not args.no_peer:
            tables["spark-sink"] = peer_times(source, schema, work, read_table, args.rows, args.repeat, timed)
            tables["spark-source"] = read_table
        best = timed.seconds
        tables["floor"] = tables["pyiceberg"] = read_table
        starts = [fresh_start(read_table) for _ in range(args.repeat)]
        start = min(starts, key=lambda one: one["total"])
        for name in ("sink", "append"):
            assert load(tables[name])[1].scan().to_arrow().num_rows == args.rows, name
        loadavg = os.getloadavg()
        print(f"rows={args.rows} shape={args.shape} input files={args.files} repeat={args.repeat} "
              f"load average {loadavg[0]:.2f} {loadavg[1]:.2f} {loadavg[2]:.2f}")
        for name, seconds in best.items():
            if name == "sink-floor":
                print(f"{name:12s} {seconds:7.2f} s  {args.rows / seconds:12,.0f} rows/s  (the rows read and handed "
                      "to a Python sink that keeps nothing)")
                continue
            files, size = files_and_bytes(tables[name])
            writes = name in ("sink", "append", "spark-sink")
            base = best["append"] if writes else best["scan"]
            print(f"{name:12s} {seconds:7.2f} s  {args.rows / seconds:12,.0f} rows/s  {files:3d} data files "
                  f"{row_groups(tables[name]):4d} row groups {size / 1e6:8.2f} MB  (time = {seconds / base:.2f} x "
                  f"pyiceberg's {'append' if writes else 'scan'})")
        print(f"source start in a fresh process (as PySpark's planning process per streaming query): "
              f"{start['total']:.2f} s, of which pyiceberg's catalog and SQLAlchemy imports {start['libraries']:.2f} s; "
              f"the source over the floor: {best['source'] - best['floor']:.2f} s; sparklink.iceberg / the pyiceberg "
              f"source: {best['pyiceberg'] / best['source']:.2f}x")
        print(timed.micro_batch_line("source", ("source", "pyiceberg", "floor", "spark-source"), "spark-source",
                                     "runtime", (("source", "sparklink.iceberg"), ("pyiceberg", "pyiceberg source"),
                                                 ("floor", "floor"))))
        if not args.no_peer:
            print(f"sparklink.iceberg / Iceberg Spark runtime (rows/s): sink "
                  f"{best['spark-sink'] / best['sink']:.2f}x, source {best['spark-source'] / best['source']:.2f}x; "
                  f"the pyiceberg source / runtime {best['spark-source'] / best['pyiceberg']:.2f}x; "
                  f"floor / runtime {best['spark-source'] / best['floor']:.2f}x; sink floor / runtime "
                  f"{best['spark-sink'] / best['sink-floor']:.2f}x")
        print(f"the sink over its floor: {best['sink'] - best['sink-floor']:.2f} s")
        print(timed.micro_batch_line("sink", ("sink", "sink-floor", "spark-sink"), "spark-sink", "runtime",
                                     (("sink", "sparklink.iceberg"), ("sink-floor", "sink floor"))))
        spark.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
