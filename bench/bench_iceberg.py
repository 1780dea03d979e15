"""Benchmark: the ``sparklink.iceberg`` sink and source against pyiceberg alone, in one process.

    PYSPARK_PYTHON=.venv/bin/python .venv/bin/python bench/bench_iceberg.py                  # 1,000,000 rows
    PYSPARK_PYTHON=.venv/bin/python .venv/bin/python bench/bench_iceberg.py --rows 200000 --repeat 1

Rows of (``id`` long, ``k`` string, ``v`` double), written once as Parquet (``--files`` files)
before anything is timed; a sqlite SQL catalog with a local warehouse under a temporary folder;
one untimed query into the sink and one out of the source warm the session up. Best of ``--repeat``:

  sink       ``readStream.parquet`` -> ``sparklink.iceberg`` (a new table; one availableNow
             micro-batch: planning, tasks, the commit), ``start()`` to the end of ``awaitTermination()``
  append     the same rows as one Arrow table in this process -> pyiceberg ``table.append`` (a new
             table; the library's own limit without Spark; reading the input not timed)
  source     a table of ``--files`` pyiceberg appends -> ``readStream.format("sparklink.iceberg")`` ->
             the ``noop`` sink (one availableNow micro-batch)
  scan       the same table -> pyiceberg ``table.scan().to_arrow()`` in this process

The data files and bytes each case's table holds are printed beside the times, and the load
average: on a shared machine the ratios are the meaningful numbers.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq


def write_input(path: Path, rows: int, files: int) -> list[pa.Table]:
    path.mkdir(parents=True)
    parts = []
    per_file = rows // files
    for number in range(files):
        first = number * per_file
        count = per_file if number < files - 1 else rows - first
        ids = pa.array(range(first, first + count), pa.int64())
        table = pa.table({"id": ids, "k": pa.array([f"key-{i % 1000}" for i in range(first, first + count)]),
                          "v": pa.array([i * 0.5 for i in range(first, first + count)], pa.float64())})
        pq.write_table(table, path / f"input-{number:03d}.parquet")
        parts.append(table)
    return parts


def catalog_options(root: Path, table: str) -> dict[str, str]:
    root.mkdir(parents=True, exist_ok=True)
    return {"table": table, "catalog.type": "sql", "catalog.uri": f"sqlite:///{root}/catalog.db",
            "catalog.warehouse": f"file://{root}/warehouse"}


def load(options: dict[str, str]):
    from pyiceberg.catalog import load_catalog

    catalog = load_catalog("default", **{k[8:]: v for k, v in options.items() if k.startswith("catalog.")})
    return catalog, catalog.load_table(options["table"])


def files_and_bytes(options: dict[str, str]) -> tuple[int, int]:
    files = load(options)[1].inspect.files()
    return files.num_rows, sum(files.column("file_size_in_bytes").to_pylist())


def time_sink(spark, source: Path, options: dict[str, str], checkpoint: Path) -> float:
    frame = spark.readStream.schema("id long, k string, v double").parquet(str(source))
    writer = frame.writeStream.format("sparklink.iceberg").options(**options).option("checkpointLocation",
                                                                                      str(checkpoint))
    start = time.perf_counter()
    writer.trigger(availableNow=True).start().awaitTermination()
    return time.perf_counter() - start


def time_append(parts: list[pa.Table], options: dict[str, str]) -> float:
    from pyiceberg.catalog import load_catalog

    catalog = load_catalog("default", **{k[8:]: v for k, v in options.items() if k.startswith("catalog.")})
    catalog.create_namespace_if_not_exists("bench")
    data = pa.concat_tables(parts)
    start = time.perf_counter()
    table = catalog.create_table(options["table"], schema=data.schema)
    table.append(data)
    return time.perf_counter() - start


def make_source_table(parts: list[pa.Table], options: dict[str, str]) -> None:
    from pyiceberg.catalog import load_catalog

    catalog = load_catalog("default", **{k[8:]: v for k, v in options.items() if k.startswith("catalog.")})
    catalog.create_namespace_if_not_exists("bench")
    table = catalog.create_table(options["table"], schema=parts[0].schema)
    for part in parts:
        table.append(part)


def time_source(spark, options: dict[str, str], checkpoint: Path) -> float:
    frame = spark.readStream.format("sparklink.iceberg").options(**options).load()
    writer = frame.writeStream.format("noop").option("checkpointLocation", str(checkpoint))
    start = time.perf_counter()
    query = writer.trigger(availableNow=True).start()
    query.awaitTermination()
    seconds = time.perf_counter() - start
    read = sum(p["numInputRows"] for p in query.recentProgress)
    assert read == load(options)[1].scan().to_arrow().num_rows, read
    return seconds


def time_scan(options: dict[str, str]) -> float:
    start = time.perf_counter()
    rows = load(options)[1].scan().to_arrow().num_rows
    seconds = time.perf_counter() - start
    assert rows > 0
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()

    import sparklink
    from sparklink.testing.spark_session import spark_session

    work = Path(tempfile.mkdtemp(prefix="bench-iceberg-"))
    try:
        source = work / "in"
        parts = write_input(source, args.rows, args.files)
        spark = spark_session("local[2]", "bench-iceberg")
        sparklink.register(spark)
        time_sink(spark, source, catalog_options(work / "warm", "bench.warm"), work / "ck-warm")  # untimed warm-up
        read_table = catalog_options(work / "read", "bench.read")
        make_source_table(parts, read_table)
        time_source(spark, read_table, work / "ck-source-warm")  # untimed warm-up of the source's workers
        best: dict[str, float] = {}
        tables: dict[str, dict[str, str]] = {"source": read_table, "scan": read_table}
        for run in range(args.repeat):
            sink_options = catalog_options(work / f"sink-{run}", "bench.events")
            append_options = catalog_options(work / f"append-{run}", "bench.events")
            cases = {  # called right away, in this iteration
                "sink": lambda o=sink_options, r=run: time_sink(spark, source, o, work / f"ck-sink-{r}"),
                "append": lambda o=append_options: time_append(parts, o),
                "source": lambda r=run: time_source(spark, read_table, work / f"ck-source-{r}"),
                "scan": lambda: time_scan(read_table),
            }
            tables["sink"], tables["append"] = sink_options, append_options
            for name, case in cases.items():
                seconds = case()
                best[name] = min(best.get(name, seconds), seconds)
        for name in ("sink", "append"):
            assert load(tables[name])[1].scan().to_arrow().num_rows == args.rows, name
        loadavg = os.getloadavg()
        print(f"rows={args.rows} input files={args.files} repeat={args.repeat} "
              f"load average {loadavg[0]:.2f} {loadavg[1]:.2f} {loadavg[2]:.2f}")
        for name, seconds in best.items():
            files, size = files_and_bytes(tables[name])
            base = best["append"] if name in ("sink", "append") else best["scan"]
            print(f"{name:7s} {seconds:7.2f} s  {args.rows / seconds:12,.0f} rows/s  {files:3d} data files "
                  f"{size / 1e6:8.2f} MB  (time = {seconds / base:.2f} x pyiceberg's "
                  f"{'append' if name in ('sink', 'append') else 'scan'})")
        spark.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
