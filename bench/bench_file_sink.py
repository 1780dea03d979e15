"""Benchmark: the same stream through Spark's built-in Parquet file sink and through
``sparklink.files`` (Parquet, without and with compaction), in one run.

    PYSPARK_PYTHON=.venv/bin/python .venv/bin/python bench/bench_file_sink.py --rows 2000000 --batches 10

Prints rows/s, the number of data files, mean file size, and ratios against Spark's sink.
Timings include the whole query (planning, tasks, commits); each sink runs ``--repeat`` times
and the best run counts.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path


def data_files(root: Path) -> list[Path]:
    found = []
    for directory, subdirs, files in os.walk(root):
        subdirs[:] = [d for d in subdirs if not d.startswith((".", "_"))]
        found.extend(Path(directory, f) for f in files if not f.startswith((".", "_")))
    return found


def run_query(spark, fmt: str, options: dict[str, str], rows: int, batches: int, work: Path, name: str) -> dict:
    out, ck = work / name / "out", work / name / "ck"
    shutil.rmtree(work / name, ignore_errors=True)
    frame = (spark.readStream.format("sparklink.sequence").option("numSplits", 2)
             .option("rowsPerSplit", rows // 2).option("maxRowsPerTrigger", rows // batches).load()
             .selectExpr("id", "split", "CAST(id % 97 AS STRING) AS kind", "id * 0.5 AS amount",
                         "timestamp_seconds(1700000000 + id) AS event_time"))
    writer = frame.writeStream.format(fmt).option("path", str(out)).option("checkpointLocation", str(ck))
    for key, value in options.items():
        writer = writer.option(key, value)
    started = time.perf_counter()
    query = writer.trigger(availableNow=True).start()
    query.awaitTermination()
    elapsed = time.perf_counter() - started
    files = data_files(out)
    total = sum(f.stat().st_size for f in files)
    count = spark.read.parquet(*[str(f) for f in files]).count() if files else 0
    assert count == rows, f"{name}: {count} rows written, expected {rows}"
    return {"name": name, "seconds": elapsed, "rows_per_s": rows / elapsed, "files": len(files),
            "mean_file_bytes": total / max(1, len(files))}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--batches", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
    from sparklink.testing import spark_session

    spark = spark_session(app_name="bench-file-sink")
    work = Path(tempfile.mkdtemp(prefix="bench-file-sink-"))
    cases = [
        ("spark-parquet", "parquet", {}),
        ("sparklink-files", "sparklink.files", {"format": "parquet", "bucketAssigner": "basepath"}),
        ("sparklink-files+compaction", "sparklink.files",
         {"format": "parquet", "bucketAssigner": "basepath", "compaction.everyNCheckpoints": str(args.batches)}),
    ]
    try:
        results = {}
        for _ in range(args.repeat):
            for name, fmt, options in cases:
                result = run_query(spark, fmt, options, args.rows, args.batches, work, name)
                if name not in results or result["rows_per_s"] > results[name]["rows_per_s"]:
                    results[name] = result
        base = results["spark-parquet"]
        print(f"\n{args.rows} rows in {args.batches} micro-batches, local[2], best of {args.repeat}")
        print(f"{'sink':<28}{'rows/s':>12}{'ratio':>8}{'files':>8}{'files ratio':>13}{'mean file KiB':>15}")
        for name, _, _ in cases:
            r = results[name]
            print(f"{name:<28}{r['rows_per_s']:>12,.0f}{r['rows_per_s'] / base['rows_per_s']:>8.2f}{r['files']:>8}"
                  f"{base['files'] / max(1, r['files']):>12.1f}x{r['mean_file_bytes'] / 1024:>15.1f}")
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
