"""Benchmark: the ``sparklink.delta`` sink against the file sink and against delta-rs alone.

    PYSPARK_PYTHON=.venv/bin/python .venv/bin/python bench/bench_delta.py                 # 1,000,000 rows
    PYSPARK_PYTHON=.venv/bin/python .venv/bin/python bench/bench_delta.py --rows 100000 --repeat 1

The input, rows of (``id`` long, ``k`` string, ``v`` double), is written once as Parquet before
anything is timed, and one untimed query into ``sparklink.delta`` warms the session up. Cases, each timed from ``start()`` to the end of ``awaitTermination()`` (one
availableNow micro-batch: planning, tasks, commit), best of ``--repeat``:

  delta       ``readStream.parquet`` -> ``sparklink.delta`` (a new table)
  files       ``readStream.parquet`` -> ``sparklink.files`` (Parquet, one bucket)
  deltalake   the same rows as one Arrow table in this process -> ``deltalake.write_deltalake``
              (a new table; the library's own limit, without Spark; reading the input not timed)

The source half (``--half source`` or ``both``): the same rows written once by delta-rs as a
Delta table of ``--files`` versions (one data file each), then

  source      ``readStream.format("sparklink.delta")`` (its initial snapshot, one availableNow
              micro-batch) -> ``noop``, timed from ``start()`` to the end of ``awaitTermination()``
  dataset     ``DeltaTable(path).to_pyarrow_dataset().to_table()`` in this process (every column
              scanned; the library's own limit, without Spark)

The load average is printed beside the figures: on a shared machine the ratios are the
meaningful numbers.
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


def write_input(path: Path, rows: int) -> None:
    ids = pa.array(range(rows), pa.int64())
    table = pa.table({"id": ids, "k": pa.array([f"key-{i % 1000}" for i in range(rows)]),
                      "v": pa.array([i * 0.5 for i in range(rows)], pa.float64())})
    path.mkdir(parents=True)
    pq.write_table(table, path / "input.parquet")


def time_stream(spark, source: Path, fmt: str, out: Path, checkpoint: Path, options: dict) -> float:
    frame = spark.readStream.schema("id long, k string, v double").parquet(str(source))
    writer = frame.writeStream.format(fmt).option("path", str(out)).option("checkpointLocation", str(checkpoint))
    start = time.perf_counter()
    writer.options(**options).trigger(availableNow=True).start().awaitTermination()
    return time.perf_counter() - start


def time_deltalake(source: Path, out: Path) -> float:
    from deltalake import write_deltalake

    table = pq.read_table(source)
    start = time.perf_counter()
    write_deltalake(str(out), table)
    return time.perf_counter() - start


def write_delta_input(source: Path, out: Path, files: int) -> None:
    from deltalake import write_deltalake

    table = pq.read_table(source)
    step = -(-table.num_rows // files)
    for start in range(0, table.num_rows, step):
        write_deltalake(str(out), table.slice(start, step), mode="append")


def time_source(spark, table: Path, checkpoint: Path) -> float:
    frame = spark.readStream.format("sparklink.delta").option("path", str(table)).load()
    start = time.perf_counter()
    (frame.writeStream.format("noop").option("checkpointLocation", str(checkpoint)).trigger(availableNow=True)
     .start().awaitTermination())
    return time.perf_counter() - start


def time_dataset(table: Path, rows: int) -> float:
    from deltalake import DeltaTable

    start = time.perf_counter()
    scanned = DeltaTable(str(table)).to_pyarrow_dataset().to_table()
    seconds = time.perf_counter() - start
    assert scanned.num_rows == rows
    return seconds


def report(title: str, rows: int, repeat: int, best: dict[str, float], reference: str) -> None:
    load = os.getloadavg()
    print(f"{title}: rows={rows} repeat={repeat} load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    for name, seconds in best.items():
        print(f"{name:10s} {seconds:7.2f} s  {rows / seconds:12,.0f} rows/s  "
              f"(time = {seconds / best[reference]:.2f} x {reference}'s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--half", choices=("sink", "source", "both"), default="both")
    parser.add_argument("--files", type=int, default=8, help="versions (data files) of the source's table")
    args = parser.parse_args()

    from deltalake import DeltaTable

    import sparklink
    from sparklink.testing.spark_session import spark_session

    work = Path(tempfile.mkdtemp(prefix="bench-delta-"))
    try:
        source = work / "in"
        write_input(source, args.rows)
        spark = spark_session("local[2]", "bench-delta")
        sparklink.register(spark)
        # untimed warm-up: the session's first streaming query pays for class loading and workers
        time_stream(spark, source, "sparklink.delta", work / "warm", work / "ck-warm", {})
        if args.half in ("sink", "both"):
            best: dict[str, float] = {}
            for run in range(args.repeat):
                cases = {
                    "delta": lambda o, c: time_stream(spark, source, "sparklink.delta", o, c, {}),
                    "files": lambda o, c: time_stream(spark, source, "sparklink.files", o, c,
                                                      {"format": "parquet", "bucketAssigner": "basepath"}),
                    "deltalake": lambda o, c: time_deltalake(source, o),
                }
                for name, case in cases.items():
                    out, checkpoint = work / f"{name}-{run}", work / f"ck-{name}-{run}"
                    seconds = case(out, checkpoint)
                    if name in ("delta", "deltalake"):
                        assert DeltaTable(str(out)).to_pyarrow_table().num_rows == args.rows
                    best[name] = min(best.get(name, seconds), seconds)
            report("sink", args.rows, args.repeat, best, "delta")
        if args.half in ("source", "both"):
            table = work / "source-table"
            write_delta_input(source, table, args.files)
            time_source(spark, table, work / "ck-source-warm")  # untimed: the source's first query
            best = {}
            for run in range(args.repeat):
                for name, case in {"source": lambda run=run: time_source(spark, table, work / f"ck-source-{run}"),
                                   "dataset": lambda: time_dataset(table, args.rows)}.items():
                    seconds = case()
                    best[name] = min(best.get(name, seconds), seconds)
            report("source", args.rows, args.repeat, best, "source")
        spark.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
