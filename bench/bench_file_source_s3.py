"""Benchmark: the file source reading S3 (a private SeaweedFS on 127.0.0.1) against the same
source reading the same files from local disk.

    PYSPARK_PYTHON=.venv/bin/python .venv/bin/python bench/bench_file_source_s3.py
    PYSPARK_PYTHON=.venv/bin/python .venv/bin/python bench/bench_file_source_s3.py --large-rows 500000 --repeat 1

Spark's own file source cannot be the reference here: this installation has no S3 connector
jars (``hadoop-aws``) for it. The inputs are those of ``bench_file_source.py`` (one large
Parquet file and one large CSV file of ``--large-rows`` rows; ``--small-files`` small ones of
100 rows each), written once locally and uploaded once with boto3 before anything is timed. Each
case is a ``spark.read`` of every row and column into Spark's ``noop`` sink, local and S3 runs
alternating, the best of ``--repeat`` kept.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_file_source import SCHEMA, make_data, timed_noop  # noqa: E402
from s3_bench_session import spark_with_seaweedfs  # noqa: E402


def upload(client, bucket: str, root: Path, directory: Path) -> None:
    for path in sorted(directory.iterdir()):
        client.upload_file(str(path), bucket, f"{directory.relative_to(root)}/{path.name}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--large-rows", type=int, default=2_000_000)
    parser.add_argument("--small-files", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()

    with spark_with_seaweedfs("bench-source-s3") as (spark, server, work):
        paths = make_data(work, args.large_rows, args.small_files, 100)
        client = server.client()
        bucket = server.create_bucket("bench-source")
        for directory in paths.values():
            upload(client, bucket, work, directory)
        best: dict[tuple[str, str], float] = {}
        for _ in range(args.repeat):
            for case, directory in paths.items():
                fmt = case.split("-")[0]
                for where, path, options in (("local", str(directory), {}),
                                             ("s3", f"s3://{bucket}/{directory.name}", server.options())):
                    reader = (spark.read.format("sparklink.files").option("path", path).option("format", fmt)
                              .options(**options))
                    frame = reader.schema(SCHEMA).load() if fmt == "csv" else reader.load()
                    seconds, _ = timed_noop(frame)
                    best[(case, where)] = min(best.get((case, where), seconds), seconds)
        print(f"\nsparklink.files, local[2], best of {args.repeat}; load average {os.getloadavg()[0]:.1f}")
        for case, directory in paths.items():
            rows = args.large_rows if case.endswith("large") else args.small_files * 100
            local, s3 = best[(case, "local")], best[(case, "s3")]
            print(f"  {case:<14} local {rows / local:>12,.0f} rows/s   s3 {rows / s3:>12,.0f} rows/s   "
                  f"s3/local {local / s3:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
