"""Benchmark: the file sink writing Parquet to S3 (a private SeaweedFS on 127.0.0.1) against the
same sink on local disk and against the plain client moving the same bytes to the same server.

    PYSPARK_PYTHON=.venv/bin/python .venv/bin/python bench/bench_s3.py                  # 6,000,000 rows
    PYSPARK_PYTHON=.venv/bin/python .venv/bin/python bench/bench_s3.py --rows 1000000 --repeat 1

Two data shapes, each written once as local Parquet (4 files) before anything is timed:

``simple`` and ``users``, the rows bench_file_sink.py writes (bench_data.py defines both).

Cases, per shape and run (the order alternates between runs; the best of ``--repeat`` counts):

* ``sparklink-s3``: the file sink streaming to ``s3://`` (``trigger(availableNow=True)``, one
  micro-batch, two tasks, defaults otherwise), timed from ``start()`` to the end of
  ``awaitTermination()``;
* ``sparklink-local``: the same query to a local directory;
* ``plain-upload``: the floor: the part files ``sparklink-local`` just wrote (the same bytes,
  read into memory first, not timed) put to the same server with pyarrow's ``S3FileSystem``
  (the AWS C++ SDK, multipart with background part uploads), one thread per file as the two tasks;
* ``spark-s3a``: the peer, Spark's own Parquet sink (the streaming file sink, which also keeps a
  ``_spark_metadata`` log) on ``s3a://`` with S3A at its defaults, in the same session on the same
  server (``hadoop-aws`` 3.5.0 from tests/jvm/hadoop-aws, resolved by ``make jvm``).

Beside each output: its data objects, Parquet row groups and bytes (listed on the server).
What S3 costs the sink is ``sparklink-s3 - sparklink-local`` (the same Spark work, the same
encoding): the line ``s3 extra / plain upload`` sets it against the floor, and ``end to end``
sets ``sparklink-s3`` against ``sparklink-local + plain-upload``; 1.25 is the target for both.
The S3 requests of a micro-batch are counted in tests/files/test_file_sink_on_s3.py
(docs/object-stores.md quotes both).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_data  # noqa: E402
from s3_bench_session import spark_with_seaweedfs, timed_in_two_threads  # noqa: E402

TUNED_PART_SIZE = "32MB"


def write_input(spark, shape: str, rows: int, path: Path) -> None:
    bench_data.write_input(spark, rows, path, shape, files=4)


def sink_run(spark, source: Path, path: str, ck: Path, options: dict) -> float:
    schema = spark.read.parquet(str(source)).schema
    frame = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1000).parquet(str(source))
    writer = (frame.coalesce(2).writeStream.format("sparklink.files").option("path", path)
              .option("format", "parquet").option("bucketAssigner", "basepath").options(**options)
              .option("checkpointLocation", str(ck)))
    started = time.perf_counter()
    writer.trigger(availableNow=True).start().awaitTermination()
    return time.perf_counter() - started


def spark_s3a_run(spark, source: Path, path: str, ck: Path) -> float:
    schema = spark.read.parquet(str(source)).schema
    frame = spark.readStream.schema(schema).parquet(str(source))
    writer = frame.coalesce(2).writeStream.format("parquet").option("path", path).option("checkpointLocation", str(ck))
    started = time.perf_counter()
    writer.trigger(availableNow=True).start().awaitTermination()
    return time.perf_counter() - started


def configure_s3a(spark, server) -> None:
    conf = spark._jsc.hadoopConfiguration()
    for key, value in {"fs.s3a.endpoint": server.endpoint, "fs.s3a.access.key": server.access_key_id,
                       "fs.s3a.secret.key": server.secret_access_key, "fs.s3a.path.style.access": "true",
                       "fs.s3a.connection.ssl.enabled": "false", "fs.s3a.endpoint.region": server.region}.items():
        conf.set(key, value)


def output_quality(client, bucket: str, prefix: str) -> tuple[int, int, int]:
    """(data objects, Parquet row groups, bytes) of the visible ``*.parquet`` objects under
    ``bucket/prefix/`` (hidden and ``_`` names skipped, as Spark's readers skip them)."""
    import io

    import pyarrow.parquet as pq

    objects = row_groups = size = 0
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=f"{prefix}/"):
        for item in page.get("Contents", []):
            parts = item["Key"][len(prefix) + 1:].split("/")
            if not item["Key"].endswith(".parquet") or any(p.startswith((".", "_")) for p in parts):
                continue
            tail = client.get_object(Bucket=bucket, Key=item["Key"], Range="bytes=-65536")["Body"].read()
            footer = io.BytesIO(tail) if len(tail) == item["Size"] else None
            if footer is None:
                footer = io.BytesIO(client.get_object(Bucket=bucket, Key=item["Key"])["Body"].read())
            objects, size = objects + 1, size + item["Size"]
            row_groups += pq.ParquetFile(footer).metadata.num_row_groups
    return objects, row_groups, size


def part_files(directory: Path) -> list[Path]:
    """The visible part files of a local output (no hidden file, no metadata)."""
    return sorted(p for p in directory.rglob("*.parquet")
                  if not any(s.startswith((".", "_")) for s in p.relative_to(directory).parts))


def plain_upload(filesystem, files: list[Path], bucket: str, prefix: str) -> tuple[float, int]:
    """Seconds to put ``files`` (read into memory first) to ``bucket/prefix/``, one thread per
    file, two at a time (as the sink's two tasks); and the bytes moved."""
    payloads = [(f"{bucket}/{prefix}/{p.name}", p.read_bytes()) for p in files]

    def put(payload: tuple[str, bytes]) -> None:
        key, data = payload
        with filesystem.open_output_stream(key) as out:
            out.write(data)

    return timed_in_two_threads(payloads, put), sum(len(d) for _, d in payloads)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=6_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--shapes", default=",".join(bench_data.SHAPES), help="comma-separated: " + ", ".join(bench_data.SHAPES))
    parser.add_argument("--no-s3a", action="store_true", help="leave out the peer, Spark's Parquet sink on S3A")
    args = parser.parse_args()
    shapes = bench_data.check_shapes(args.shapes)

    from sparklink.storage import S3Config

    with spark_with_seaweedfs("bench-s3") as (spark, server, work):
        filesystem = S3Config.from_options(server.options()).arrow_filesystem()
        s3a = True  # the session has hadoop-aws (s3_bench_session); --no-s3a leaves the peer out
        if args.no_s3a:
            s3a = False
        configure_s3a(spark, server)
        for shape in shapes:
            write_input(spark, shape, args.rows, work / f"input-{shape}")
        best: dict[tuple[str, str], float] = {}
        sizes: dict[str, int] = {}
        quality: dict[tuple[str, str], tuple[int, int, int]] = {}
        client = server.client()
        loads: list[float] = []
        for run in range(args.repeat):
            bucket = server.create_bucket(f"bench-{run}")
            for shape in shapes:
                source = work / f"input-{shape}"
                local_out = work / f"out-{shape}-{run}"
                cases = [
                    ("sparklink-s3", sink_run, (spark, source, f"s3://{bucket}/{shape}", work / f"ck-s3-{shape}-{run}",
                                                server.options())),
                    ("sparklink-local", sink_run, (spark, source, str(local_out), work / f"ck-local-{shape}-{run}", {})),
                    # tuned: 32 MiB parts (the default is 8 MiB; S3A's own part is 64 MiB)
                    ("sparklink-s3-32mb", sink_run, (spark, source, f"s3://{bucket}/tuned-{shape}",
                                                     work / f"ck-s3-32mb-{shape}-{run}",
                                                     dict(server.options(), **{"s3.partSize": TUNED_PART_SIZE}))),
                ]
                if s3a:
                    cases.append(("spark-s3a", spark_s3a_run, (spark, source, f"s3a://{bucket}/spark-{shape}",
                                                               work / f"ck-s3a-{shape}-{run}")))
                if run % 2:
                    cases.reverse()
                times = {}
                for name, case, case_args in cases:
                    loads.append(os.getloadavg()[0])
                    times[name] = case(*case_args)
                times["plain-upload"], sizes[shape] = plain_upload(filesystem, part_files(local_out), bucket,
                                                                   f"plain-{shape}")
                quality[(shape, "sparklink-s3")] = output_quality(client, bucket, shape)
                quality[(shape, "sparklink-s3-32mb")] = output_quality(client, bucket, f"tuned-{shape}")
                if s3a:
                    quality[(shape, "spark-s3a")] = output_quality(client, bucket, f"spark-{shape}")
                for name, seconds in times.items():
                    best[(shape, name)] = min(best.get((shape, name), seconds), seconds)
                shutil.rmtree(local_out, ignore_errors=True)
        print(f"\nfile sink, Parquet, {args.rows:,} rows, local[2], one micro-batch of two tasks, best of "
              f"{args.repeat}; load average during the runs {min(loads):.1f}-{max(loads):.1f} "
              f"(mean {sum(loads) / len(loads):.1f}) on {os.cpu_count()} cores")
        for shape in shapes:
            print(f"\n  shape {shape}: {sizes[shape] / 2 ** 20:.1f} MiB of Parquet")
            for name in ("sparklink-s3", "sparklink-s3-32mb", "sparklink-local", "spark-s3a", "plain-upload"):
                seconds = best.get((shape, name))
                if seconds is not None:
                    extra = f"  ({sizes[shape] / 2 ** 20 / seconds:,.0f} MiB/s)" if name == "plain-upload" else ""
                    if (shape, name) in quality:
                        objects, row_groups, size = quality[(shape, name)]
                        extra = f"  {objects} objects, {row_groups} row groups, {size / 2 ** 20:.1f} MiB"
                    print(f"    {name:<17}{args.rows / seconds:>12,.0f} rows/s  {seconds:>7.2f} s{extra}")
            s3, local, upload = (best[(shape, n)] for n in ("sparklink-s3", "sparklink-local", "plain-upload"))
            print(f"    s3 / local (rows/s)            {local / s3:.2f}x")
            print(f"    s3 extra / plain upload        {(s3 - local) / upload:.2f}x  "
                  f"({s3 - local:+.2f} s against {upload:.2f} s; target 1.25)")
            print(f"    end to end: s3 / (local + upload) {s3 / (local + upload):.2f}x  (target 1.25)")
            if (shape, "spark-s3a") in best:
                print(f"    sparklink-s3 / spark-s3a (rows/s) {best[(shape, 'spark-s3a')] / s3:.2f}x; tuned "
                      f"(s3.partSize={TUNED_PART_SIZE}) {best[(shape, 'spark-s3a')] / best[(shape, 'sparklink-s3-32mb')]:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
