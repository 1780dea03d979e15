"""Benchmark: the file sink writing Parquet to S3 (a private SeaweedFS on 127.0.0.1) against the
same sink on local disk and against a plain pyarrow write of the same rows to the same server
(the store's own limit), fed by Spark's native Parquet source.

    PYSPARK_PYTHON=.venv/bin/python .venv/bin/python bench/bench_s3.py                 # 2,000,000 rows
    PYSPARK_PYTHON=.venv/bin/python .venv/bin/python bench/bench_s3.py --rows 500000 --repeat 1

The input (``id`` long, ``k`` string, ``v`` double) is written once as local Parquet before
anything is timed. ``sparklink-s3`` and ``sparklink-local`` are one streaming query each
(``trigger(availableNow=True)``, ``maxFilesPerTrigger`` unset: one micro-batch, two tasks), timed
from ``start()`` to the end of ``awaitTermination()``. ``pyarrow-s3`` writes the same rows (read
into memory first, not timed) as two Parquet files through pyarrow's ``S3FileSystem``, one per
thread, as the two tasks do: what the server takes without Spark or the sink. The best of
``--repeat`` runs counts. The S3 requests of a micro-batch are counted in
tests/files/test_file_sink_on_s3.py (docs/object-stores.md quotes both).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import threading
import time
from pathlib import Path

import pyarrow.parquet as pq
from s3_bench_session import spark_with_seaweedfs


def write_input(spark, rows: int, path: Path) -> None:
    (spark.range(rows, numPartitions=2).selectExpr("id", "CAST(id % 97 AS STRING) AS k", "id * 0.5 AS v")
     .write.mode("overwrite").parquet(str(path)))


def sink_run(spark, source: Path, path: str, ck: Path, options: dict) -> float:
    schema = spark.read.parquet(str(source)).schema
    frame = spark.readStream.schema(schema).parquet(str(source))
    writer = (frame.writeStream.format("sparklink.files").option("path", path).option("format", "parquet")
              .option("bucketAssigner", "basepath").options(**options).option("checkpointLocation", str(ck)))
    started = time.perf_counter()
    writer.trigger(availableNow=True).start().awaitTermination()
    return time.perf_counter() - started


def pyarrow_run(server, source: Path, bucket: str) -> float:
    from sparklink.storage import S3Config

    filesystem = S3Config.from_options(server.options()).arrow_filesystem()
    table = pq.read_table(source)
    halves = [table.slice(0, table.num_rows // 2), table.slice(table.num_rows // 2)]

    def write(index: int) -> None:
        pq.write_table(halves[index], f"{bucket}/plain/part-{index}.parquet", filesystem=filesystem,
                       compression="snappy")

    started = time.perf_counter()
    threads = [threading.Thread(target=write, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    with spark_with_seaweedfs("bench-s3") as (spark, server, work):
        source = work / "input"
        write_input(spark, args.rows, source)
        best: dict[str, float] = {}
        for run in range(args.repeat):
            bucket = server.create_bucket(f"bench-{run}")
            times = {
                "sparklink-s3": sink_run(spark, source, f"s3://{bucket}/out", work / f"ck-s3-{run}", server.options()),
                "sparklink-local": sink_run(spark, source, str(work / f"out-{run}"), work / f"ck-local-{run}",
                                            {"sparkMetadata": "false"}),
                "pyarrow-s3": pyarrow_run(server, source, bucket),
            }
            for name, seconds in times.items():
                best[name] = min(best.get(name, seconds), seconds)
            shutil.rmtree(work / f"out-{run}", ignore_errors=True)
        print(f"\n{args.rows:,} rows of Parquet, local[2], best of {args.repeat}; load average "
              f"{os.getloadavg()[0]:.1f}")
        for name, seconds in best.items():
            print(f"  {name:<18}{args.rows / seconds:>12,.0f} rows/s  {seconds:>7.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
