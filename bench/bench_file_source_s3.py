"""Benchmark: the file source reading S3 (a private SeaweedFS on 127.0.0.1) against the same
source reading the same files from local disk, and against the plain client fetching the same
bytes from the same server.

    PYSPARK_PYTHON=.venv/bin/python .venv/bin/python bench/bench_file_source_s3.py
    PYSPARK_PYTHON=.venv/bin/python .venv/bin/python bench/bench_file_source_s3.py --large-rows 500000 --repeat 1

The peer, ``s3a``: Spark's own file source (``spark.read.parquet`` / ``.csv``) reading the same
objects through S3A at its defaults, in the same session on the same server (``hadoop-aws``
3.5.0 from tests/jvm/hadoop-aws, resolved by ``make jvm``); ``s3/s3a`` is its time over
sparklink's (above 1: sparklink is faster).

Inputs, per data shape, written once locally and uploaded once with boto3 before anything is
timed: one large Parquet file (row groups of 256,000 rows) and one large CSV file of
``--large-rows`` rows, and ``--small-files`` small files of each of 100 rows, of the
shapes ``simple`` and ``users`` (bench_data.py; the same files bench_file_source.py reads).

Each case is a ``spark.read`` of every row and column into Spark's ``noop`` sink; local and S3
runs alternate, the best of ``--repeat`` kept. ``plain-get`` is the floor: the same objects
fetched whole in two threads (as the two tasks), nothing decoded: small objects one after
another with pyarrow's ``S3FileSystem``, large ones with boto3's transfer manager (parallel
ranged GETs). The line ``s3 / (local + get)`` sets the S3 read against the
local read plus that floor. ``floor`` (large cases): the same rows yielded from memory by a
Python data source (``bench_file_source``'s ``bench.memory``, an Arrow IPC file made untimed),
what any Python source pays to hand these rows to Spark; ``floor/s3a`` is that hand-over's own
ratio to the peer, the most a Python source can reach, and ``s3/floor`` sparklink's share of
the rest (1.00: reading and decoding cost nothing beside the hand-over). ``pyarrow`` (the large
Parquet case): the direct pyarrow reader (``bench_file_source``'s ``bench.pyarrow``: two tasks
that open the object with pyarrow's ``S3FileSystem`` and yield ``iter_batches`` of half its row
groups, no sparklink code), what a Python Parquet reader reaches by itself; ``pyarrow/s3a`` is
its ratio to the peer and ``s3/pyarrow`` sparklink's speed against it. For the large cases
the CPU seconds of each reader are printed too, split into the JVM, its Python workers and the
SeaweedFS server: the runs keep both cores busy, so what reading S3 costs in CPU (the client's
requests, the server's answers) is time taken from decoding.
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_data import SCHEMAS, SHAPES, check_shapes, make_files, make_table  # noqa: E402
from bench_file_source import _MemoryFloor, _PyarrowParquet, write_floor_file  # noqa: E402
from s3_bench_session import cpu_seconds_by_kind, spark_with_seaweedfs, timed_in_two_threads  # noqa: E402


def timed_noop(frame, cpu: list | None = None) -> float:
    """Seconds of writing every row of ``frame`` to ``noop``; with ``cpu``, appends the run's CPU
    seconds by kind (:func:`s3_bench_session.cpu_seconds_by_kind`)."""
    before = cpu_seconds_by_kind() if cpu is not None else None
    started = time.perf_counter()
    frame.write.format("noop").mode("overwrite").save()
    seconds = time.perf_counter() - started
    if cpu is not None and before is not None:
        cpu.append({kind: spent - before[kind] for kind, spent in cpu_seconds_by_kind().items()})
    return seconds


def upload(client, bucket: str, root: Path, directory: Path) -> None:
    for path in sorted(directory.iterdir()):
        client.upload_file(str(path), bucket, f"{directory.relative_to(root)}/{path.name}")


def plain_get(filesystem, client, bucket: str, prefix: str) -> float:
    """Seconds to fetch every object under ``bucket/prefix`` whole (listing not timed), two
    threads each taking the next object: small ones with pyarrow's ``S3FileSystem`` (one
    request after another), large ones with boto3's transfer manager (parallel ranged GETs)."""
    from pyarrow.fs import FileSelector

    infos = filesystem.get_file_info(FileSelector(f"{bucket}/{prefix}"))

    def get(info) -> None:
        if info.size > 8 * 1024 * 1024:
            client.download_fileobj(bucket, info.path.partition("/")[2], io.BytesIO())
            return
        with filesystem.open_input_stream(info.path) as stream:
            stream.read()

    return timed_in_two_threads(infos, get)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--large-rows", type=int, default=2_000_000)
    parser.add_argument("--small-files", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--shapes", default=",".join(SHAPES), help="comma-separated: " + ", ".join(SHAPES))
    cases = ("parquet-large", "csv-large", "parquet-small", "csv-small")
    parser.add_argument("--cases", default=",".join(cases), help="comma-separated: " + ", ".join(cases))
    args = parser.parse_args()
    shapes = check_shapes(args.shapes)
    wanted = [c for c in args.cases.split(",") if c]
    if not wanted or set(wanted) - set(cases):
        parser.error(f"--cases {args.cases!r}: a comma-separated subset of {', '.join(cases)}")

    from sparklink.storage import S3Config

    with spark_with_seaweedfs("bench-source-s3") as (spark, server, work):
        client = server.client()
        filesystem = S3Config.from_options(server.options()).arrow_filesystem()
        bucket = server.create_bucket("bench-source")
        paths: dict[tuple[str, str], Path] = {}
        for shape in shapes:
            for case, directory in make_files(work, shape, args.large_rows, args.small_files, 100).items():
                if case in wanted:
                    upload(client, bucket, work, directory)
                    paths[(shape, case)] = directory
            if any(case.endswith("large") for case in wanted):
                write_floor_file(make_table(shape, args.large_rows), work / f"{shape}-floor.arrow")
        _MemoryFloor.register(spark)
        _PyarrowParquet.register(spark)
        best: dict[tuple[str, str, str], float] = {}
        cpu: dict[tuple[str, str, str], list] = {}
        loads: list[float] = []
        for run in range(args.repeat):
            for (shape, case), directory in paths.items():
                fmt = case.split("-")[0]
                runs = [("local", str(directory), {}), ("s3", f"s3://{bucket}/{directory.name}", server.options()),
                        ("s3a", f"s3a://{bucket}/{directory.name}", None)]
                if run % 2:
                    runs.reverse()
                times = {}
                for where, path, options in runs:
                    if options is None:  # Spark's own source on S3A
                        reader = spark.read.format(fmt).option("path", path)
                    else:
                        reader = (spark.read.format("sparklink.files").option("path", path).option("format", fmt)
                                  .options(**options))
                    frame = reader.schema(SCHEMAS[shape]).load() if fmt == "csv" else reader.load()
                    loads.append(os.getloadavg()[0])
                    times[where] = timed_noop(frame, cpu.setdefault((shape, case, where), []))
                if case.endswith("large"):
                    times["floor"] = timed_noop(spark.read.format("bench.memory").option("schema", SCHEMAS[shape])
                                                .option("path", str(work / f"{shape}-floor.arrow")).load(),
                                                cpu.setdefault((shape, case, "floor"), []))
                if case == "parquet-large":
                    times["pyarrow"] = timed_noop(
                        spark.read.format("bench.pyarrow").option("schema", SCHEMAS[shape])
                        .option("path", f"{bucket}/{directory.name}/big.parquet")
                        .option("endpoint", server.endpoint.removeprefix("http://"))
                        .option("accessKey", server.access_key_id).option("secretKey", server.secret_access_key)
                        .load(), cpu.setdefault((shape, case, "pyarrow"), []))
                times["plain-get"] = plain_get(filesystem, client, bucket, directory.name)
                for where, seconds in times.items():
                    best[(shape, case, where)] = min(best.get((shape, case, where), seconds), seconds)
        print(f"\nsparklink.files, local[2], best of {args.repeat}; load average during the runs "
              f"{min(loads):.1f}-{max(loads):.1f} (mean {sum(loads) / len(loads):.1f}) on {os.cpu_count()} cores")
        print(f"{'shape':<8}{'case':<15}{'local rows/s':>14}{'s3 rows/s':>12}{'s3/local':>10}"
              f"{'plain-get s':>13}{'s3 s':>8}{'s3/(local+get)':>16}{'s3a rows/s':>12}{'s3/s3a':>8}"
              f"{'floor/s3a':>11}{'s3/floor':>10}{'pyarrow/s3a':>13}{'s3/pyarrow':>12}")
        for (shape, case) in paths:
            rows = args.large_rows if case.endswith("large") else args.small_files * 100
            local, s3, get, s3a = (best[(shape, case, w)] for w in ("local", "s3", "plain-get", "s3a"))
            print(f"{shape:<8}{case:<15}{rows / local:>14,.0f}{rows / s3:>12,.0f}{local / s3:>10.2f}"
                  f"{get:>13.3f}{s3:>8.2f}{s3 / (local + get):>16.2f}{rows / s3a:>12,.0f}{s3a / s3:>8.2f}"
                  + (f"{s3a / best[(shape, case, 'floor')]:>11.2f}{best[(shape, case, 'floor')] / s3:>10.2f}"
                     if (shape, case, "floor") in best else "")
                  + (f"{s3a / best[(shape, case, 'pyarrow')]:>13.2f}{best[(shape, case, 'pyarrow')] / s3:>12.2f}"
                     if (shape, case, "pyarrow") in best else ""))
        print("\nCPU seconds per run (mean over the runs after the first, which starts the Python workers and "
              "warms the JVM; JVM / its Python workers / the SeaweedFS server = sum): with two cores kept busy, "
              "a run's time follows the sum")
        for (shape, case) in paths:
            if not case.endswith("large"):
                continue
            cells = []
            for where in ("local", "s3", "s3a", "floor", "pyarrow"):
                if (shape, case, where) not in cpu:
                    continue
                runs = cpu[(shape, case, where)][1:] or cpu[(shape, case, where)]
                mean = {kind: sum(run[kind] for run in runs) / len(runs) for kind in ("jvm", "python", "store")}
                cells.append(f"{where} {mean['jvm']:.2f}/{mean['python']:.2f}/{mean['store']:.2f}"
                             f" = {sum(mean.values()):.2f}")
            print(f"{shape:<8}{case:<15}" + "   ".join(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
