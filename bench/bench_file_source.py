"""Benchmark: sparklink.files vs Spark's built-in file source, on the same files, in one run.

Parquet and CSV, one large file and many small files: rows/s of a full read (count of a
column after a map that forces every row through), the ratio sparklink/Spark, and the
per-trigger discovery time of the file source's enumerator with 100,000 files present.

    PYSPARK_PYTHON=.venv/bin/python .venv/bin/python bench/bench_file_source.py [--small-files 2000]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

SCHEMA = "id long, name string, score double"


def make_data(root: Path, large_rows: int, small_files: int, small_rows: int) -> dict[str, Path]:
    paths = {}
    for kind in ("parquet", "csv"):
        large, small = root / f"{kind}-large", root / f"{kind}-small"
        large.mkdir()
        small.mkdir()
        table = pa.table({"id": pa.array(range(large_rows), pa.int64()),
                          "name": pa.array([f"name-{i % 1000}" for i in range(large_rows)]),
                          "score": pa.array([i * 0.5 for i in range(large_rows)])})
        piece = table.slice(0, small_rows)
        if kind == "parquet":
            pq.write_table(table, large / "big.parquet", row_group_size=256_000)
            for i in range(small_files):
                pq.write_table(piece, small / f"f{i:06d}.parquet")
        else:
            options = pacsv.WriteOptions(include_header=False)
            pacsv.write_csv(table, large / "big.csv", options)
            for i in range(small_files):
                pacsv.write_csv(piece, small / f"f{i:06d}.csv", options)
        paths[f"{kind}-large"], paths[f"{kind}-small"] = large, small
    return paths


def timed_count(frame) -> tuple[int, float]:
    started = time.perf_counter()
    rows = frame.selectExpr("sum(id) s", "count(*) c").collect()[0]["c"]
    return rows, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--large-rows", type=int, default=3_000_000)
    parser.add_argument("--small-files", type=int, default=2_000)
    parser.add_argument("--small-rows", type=int, default=100)
    parser.add_argument("--listing-files", type=int, default=100_000)
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", os.sys.executable)
    from sparklink.testing import spark_session

    spark = spark_session(app_name="bench-file-source")
    root = Path(tempfile.mkdtemp(prefix="bench-fs-"))
    paths = make_data(root, args.large_rows, args.small_files, args.small_rows)
    print(f"{'case':<16}{'spark rows/s':>16}{'sparklink rows/s':>20}{'ratio':>8}")
    for case, path in paths.items():
        fmt = case.split("-")[0]
        builtin = spark.read.format(fmt)
        ours = spark.read.format("sparklink.files").option("path", str(path)).option("format", fmt)
        if fmt == "csv":
            builtin, ours = builtin.schema(SCHEMA), ours.schema(SCHEMA)
        timed_count(builtin.load(str(path)))  # warm-up (JVM, Python workers)
        timed_count(ours.load())
        rows_spark, t_spark = timed_count(builtin.load(str(path)))
        rows_ours, t_ours = timed_count(ours.load())
        assert rows_spark == rows_ours, (case, rows_spark, rows_ours)
        print(f"{case:<16}{rows_spark / t_spark:>16,.0f}{rows_ours / t_ours:>20,.0f}{t_spark / t_ours:>8.2f}")

    from sparklink.files.source.config import FileSourceConfig
    from sparklink.files.source.enumerator import FileSplitEnumerator
    from sparklink.source import ReadLimit

    listing = root / "listing"
    for d in range(20):
        directory = listing / f"d{d:02d}"
        directory.mkdir(parents=True)
        for i in range(args.listing_files // 20):
            with open(directory / f"f{i:06d}.txt", "w") as handle:
                handle.write("x\n")
    enumerator = FileSplitEnumerator(FileSourceConfig(paths=(str(listing),), format="text", min_file_age=0.0),
                                     streaming=True)
    time.sleep(0.2)
    position = enumerator.latest_offset(enumerator.initial_offset(), ReadLimit(max_files=10**9))
    timings = []
    for _ in range(3):  # every file already processed: the steady-state cost of one trigger
        started = time.perf_counter()
        assert enumerator.latest_offset(position, ReadLimit(max_files=1000)) == position
        timings.append(time.perf_counter() - started)
    print(f"discovery per trigger with {args.listing_files:,} processed files present: "
          f"{min(timings) * 1000:.0f} ms (best of 3), offset size {len(str(position))} bytes")
    spark.stop()


if __name__ == "__main__":
    main()
