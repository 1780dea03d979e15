"""Benchmark: ``sparklink.files`` against Spark's own file sinks, fed by Spark's native Parquet
source so that the sink is the bottleneck.

    PYSPARK_PYTHON=.venv/bin/python .venv/bin/python bench/bench_file_sink.py            # 6,000,000 rows
    PYSPARK_PYTHON=.venv/bin/python .venv/bin/python bench/bench_file_sink.py --rows 1000000 --repeat 1
    PYSPARK_PYTHON=.venv/bin/python .venv/bin/python bench/bench_file_sink.py --quick    # smoke run: 100,000 rows, once
    PYSPARK_PYTHON=.venv/bin/python .venv/bin/python bench/bench_file_sink.py --profile  # where the time goes

Two data shapes (``--shapes``), each written once as Parquet before anything is timed:

  simple  ``id`` long, ``k`` string of 97 distinct values, ``v = id * 0.5``, ``event_time``
          spread over the 24 hours of one day (the rows of the first version of this bench);
  users   ``id``, ``k`` a high-cardinality string (about one distinct value per row), ``v``
          random doubles, ``amount`` decimal(12,2), ``event_time`` random within the day;
          ``k``, ``v`` and ``amount`` are null in about 3 % of the rows each.

Each case runs three systems on the same input, alternating, ``--repeat`` times (the best run
of each counts): Spark's own sink, ``sparklink.files``, and the floor: a Python data source
whose writer only iterates the Arrow batches Spark hands it (what every Python sink pays
before doing anything). The table gives sparklink's rows/s, Spark's, the floor's, the ratio to
Spark (> 1: faster) and sparklink's time over the floor's (1.00: nothing added). Streaming cases read with
``spark.readStream.parquet`` and write with ``trigger(availableNow=True)`` (one micro-batch);
the time is the whole query, from ``start()`` to the end of ``awaitTermination()`` (planning,
tasks, commit). For each run it reports rows/s, the ratio to Spark, the data files, row
groups per file and rows per row group (Parquet), and bytes on disk. The load average is
printed beside the figures: the ratio is the meaningful number on a shared machine.

Cases:
  parquet        one bucket (``bucketAssigner=basepath``)   vs  ``writeStream.format("parquet")``
  parquet-default  the options a user leaves alone (buckets by processing time, hour by hour)
  parquet-hourly 24 buckets (``datetime`` on event_time)     vs  the same with ``partitionBy(hour)``
  json, csv      one bucket, ``rollingPolicy=checkpoint``     vs  ``writeStream.format("json" / "csv")``
  json-default,  one bucket, the options a user leaves alone (the ``default`` rolling policy:
  csv-default    files carried across micro-batches), timed until every row is visible, that
                 is including ``sparklink.files.finish``
  batch-parquet  ``df.write.format("sparklink.files")``      vs  ``df.write.parquet``
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_data import SHAPES, check_shapes, write_input  # noqa: E402

HOUR_FORMAT = "yyyy-MM-dd--HH"
SYSTEMS = ("spark", "sparklink", "floor")
QUICK_ROWS = 100_000

# case -> (Spark's sink, sparklink's options); "hourly" adds Spark's partitionBy on the hour column
CASES = {
    "parquet": ("parquet", {"format": "parquet", "bucketAssigner": "basepath"}),
    "parquet-default": ("parquet", {"format": "parquet"}),
    "parquet-hourly": ("parquet", {"format": "parquet", "bucketAssigner": "datetime", "bucketColumn": "event_time",
                                   "bucketFormat": f"'hour='{HOUR_FORMAT}", "bucketTimezone": "UTC"}),
    "json": ("json", {"format": "json", "bucketAssigner": "basepath", "rollingPolicy": "checkpoint"}),
    "csv": ("csv", {"format": "csv", "bucketAssigner": "basepath", "rollingPolicy": "checkpoint"}),
    "json-default": ("json", {"format": "json", "bucketAssigner": "basepath"}),
    "csv-default": ("csv", {"format": "csv", "bucketAssigner": "basepath"}),
    "batch-parquet": ("parquet", {"format": "parquet", "bucketAssigner": "basepath"}),
}


def data_files(root: Path) -> list[Path]:
    """Files a reader sees (names starting with '.' or '_' are hidden), in every bucket."""
    found = []
    for directory, subdirs, files in os.walk(root):
        subdirs[:] = [d for d in subdirs if not d.startswith((".", "_"))]
        found.extend(Path(directory, f) for f in files if not f.startswith((".", "_")))
    return found


def output_quality(out: Path, fmt: str) -> dict:
    """Files, bytes, rows and (Parquet) row groups of a finished output."""
    files = data_files(out)
    quality = {"files": len(files), "bytes": sum(f.stat().st_size for f in files), "row_groups": 0, "rows": 0}
    for path in files:
        if fmt == "parquet":
            metadata = pq.ParquetFile(path).metadata
            quality["row_groups"] += metadata.num_row_groups
            quality["rows"] += metadata.num_rows
        else:
            with open(path, "rb") as handle:
                quality["rows"] += sum(chunk.count(b"\n") for chunk in iter(lambda: handle.read(1 << 24), b""))
    return quality


class DiscardFloor:
    """The floor: a Python data source whose writers only iterate the Arrow batches (built
    lazily so that importing this module does not need PySpark)."""

    registered = False

    @classmethod
    def register(cls, spark) -> None:
        if cls.registered:
            return
        from pyspark.sql.datasource import (DataSource, DataSourceArrowWriter, DataSourceStreamArrowWriter,
                                            WriterCommitMessage)

        class DiscardWriter(DataSourceStreamArrowWriter):
            def write(self, iterator):
                for _ in iterator:
                    pass
                return WriterCommitMessage()

            def commit(self, messages, batchId):
                pass

            def abort(self, messages, batchId):
                pass

        class DiscardBatchWriter(DataSourceArrowWriter):
            def write(self, iterator):
                for _ in iterator:
                    pass
                return WriterCommitMessage()

        class Discard(DataSource):
            @classmethod
            def name(cls):
                return "bench.discard"

            def streamWriter(self, schema, overwrite):
                return DiscardWriter()

            def writer(self, schema, overwrite):
                return DiscardBatchWriter()

        spark.dataSource.register(Discard)
        cls.registered = True


def run_case(spark, case: str, system: str, source: Path, work: Path) -> dict:
    """One timed run of one system on one case; returns its figures."""
    spark_format, options = CASES[case]
    target = work / f"{case}-{system}"
    shutil.rmtree(target, ignore_errors=True)
    os.sync()  # no run pays for the write-back of an earlier run's files (an fsync would wait for it)
    out, ck = target / "out", target / "ck"
    schema = spark.read.parquet(str(source)).schema
    if case.startswith("batch"):
        frame = spark.read.parquet(str(source))
        started = time.perf_counter()
        if system == "spark":
            frame.write.parquet(str(out))
        elif system == "floor":
            frame.write.format("bench.discard").mode("append").save()
        else:
            frame.write.format("sparklink.files").options(path=str(out), **options).save()
        elapsed = time.perf_counter() - started
    else:
        frame = spark.readStream.schema(schema).parquet(str(source))
        if system == "floor":
            writer = frame.writeStream.format("bench.discard")
        elif system == "spark":
            if case == "parquet-hourly":
                frame = frame.selectExpr("*", f"date_format(event_time, '{HOUR_FORMAT}') AS hour")
            writer = frame.writeStream.format(spark_format).option("path", str(out))
            if case == "parquet-hourly":
                writer = writer.partitionBy("hour")
        else:
            writer = frame.writeStream.format("sparklink.files").options(path=str(out), **options)
        started = time.perf_counter()
        query = writer.option("checkpointLocation", str(ck)).trigger(availableNow=True).start()
        query.awaitTermination()
        if system == "sparklink":  # until every row is visible: the query's end of input ran
            from sparklink.spark.end_of_input import await_end_of_input

            ended = time.perf_counter()
            await_end_of_input(spark, [str(query.id)])
            if case.endswith("-default"):  # a no-op when the end of input finished the carried files
                import sparklink.files

                sparklink.files.finish(spark, str(out))
            print(f"    sparklink {case}: query {ended - started:.2f} s, end of input and finish "
                  f"{time.perf_counter() - ended:.2f} s", flush=True)
        elapsed = time.perf_counter() - started
    if system == "floor":
        return {"seconds": elapsed, "files": 0, "bytes": 0, "row_groups": 0, "rows": None}
    quality = output_quality(out, spark_format)
    shutil.rmtree(target, ignore_errors=True)
    return {"seconds": elapsed, **quality}


def print_table(results: dict, rows: int, repeat: int, loads: list[float]) -> None:
    print(f"\n{rows:,} rows, local[2], best of {repeat} alternating runs; "
          f"load average (1 min) during the runs {min(loads):.1f}-{max(loads):.1f}")
    header = (f"{'case':<15}{'shape':<8}{'sparklink/s':>12}{'Spark/s':>11}{'floor/s':>11}{'vs Spark':>9}"
              f"{'vs floor':>9}{'files':>7}{'RG/file':>8}{'rows/RG':>11}{'MiB':>7}{'bytes/Spark':>12}")
    print(header)
    print("-" * len(header))
    for (case, shape), by_system in results.items():
        mine, spark, floor = by_system["sparklink"], by_system["spark"], by_system["floor"]
        groups = mine["row_groups"]
        per_file = f"{groups / mine['files']:.1f}" if groups else "-"
        per_group = f"{rows / groups:,.0f}" if groups else "-"
        print(f"{case:<15}{shape:<8}{rows / mine['seconds']:>12,.0f}{rows / spark['seconds']:>11,.0f}"
              f"{rows / floor['seconds']:>11,.0f}{spark['seconds'] / mine['seconds']:>9.2f}"
              f"{mine['seconds'] / floor['seconds']:>9.2f}{mine['files']:>7}{per_file:>8}{per_group:>11}"
              f"{mine['bytes'] / 2**20:>7.1f}{mine['bytes'] / spark['bytes']:>12.2f}")
    print("vs Spark: Spark's time / sparklink's (> 1: sparklink faster); vs floor: sparklink's time / the "
          "floor's (a Python writer that drops the batches; 1.00: sparklink adds nothing)")


def profile(spark, source: Path, work: Path, rows: int) -> None:
    """Where a Parquet micro-batch's time goes: Spark reading (noop sink), Spark's Arrow
    hand-over to a Python writer that only iterates the batches, sparklink's full sink, and
    pyarrow's encoding and fsync of the same rows in this process."""
    DiscardFloor.register(spark)
    schema = spark.read.parquet(str(source)).schema

    def timed(fmt: str, options: dict) -> float:
        target = work / "profile"
        shutil.rmtree(target, ignore_errors=True)
        frame = spark.readStream.schema(schema).parquet(str(source))
        writer = frame.writeStream.format(fmt).options(**options).option("checkpointLocation", str(target / "ck"))
        started = time.perf_counter()
        query = writer.trigger(availableNow=True).start()
        query.awaitTermination()
        return time.perf_counter() - started

    steps = {
        "Spark reads the input (noop sink)": ("noop", {}),
        "+ Arrow hand-over to a Python writer that drops the batches": ("bench.discard", {}),
        "Spark's Parquet sink": ("parquet", {"path": str(work / "profile" / "out")}),
        "sparklink.files, Parquet, one bucket (the whole sink)": (
            "sparklink.files", {"path": str(work / "profile" / "out"), **CASES["parquet"][1]}),
        "Spark's JSON sink": ("json", {"path": str(work / "profile" / "out")}),
        "sparklink.files, JSON lines, one bucket (the whole sink)": (
            "sparklink.files", {"path": str(work / "profile" / "out"), **CASES["json"][1]}),
    }
    def timed_batch(fmt: str, options: dict) -> float:
        target = work / "profile"
        shutil.rmtree(target, ignore_errors=True)
        started = time.perf_counter()
        spark.read.parquet(str(source)).write.format(fmt).mode("append").options(**options).save()
        return time.perf_counter() - started

    batch_steps = {
        "df.write: Spark reads the input (noop sink)": ("noop", {}),
        "df.write: + Arrow hand-over to a Python writer that drops them": ("bench.discard", {}),
        "df.write: Spark's Parquet writer": ("parquet", {"path": str(work / "profile" / "out")}),
        "df.write: sparklink.files, Parquet": (
            "sparklink.files", {"path": str(work / "profile" / "out"), **CASES["batch-parquet"][1]}),
    }
    best = {name: min(timed(fmt, options) for _ in range(3)) for name, (fmt, options) in steps.items()}
    best.update({name: min(timed_batch(fmt, options) for _ in range(3))
                 for name, (fmt, options) in batch_steps.items()})
    table = pq.read_table(source)
    half = table.slice(0, table.num_rows // 2)  # one task's share with local[2]
    started = time.perf_counter()
    batches = half.to_batches(max_chunksize=10_000)
    path = work / "profile-encode.parquet"
    with pq.ParquetWriter(path, half.schema, compression="snappy") as writer:
        writer.write_table(half.__class__.from_batches(batches), row_group_size=half.num_rows)
    encode = time.perf_counter() - started
    started = time.perf_counter()
    with open(path, "rb+") as handle:
        os.fsync(handle.fileno())
    sync = time.perf_counter() - started
    print(f"\nprofile, {rows:,} rows in one micro-batch, 2 tasks (best of 3), load average {os.getloadavg()[0]:.1f}")
    for name, seconds in best.items():
        print(f"  {name:<64}{seconds:>7.2f} s")
    print(f"  {'pyarrow encodes one task share (' + format(half.num_rows, ',') + ' rows, snappy), in process':<64}"
          f"{encode:>7.2f} s")
    print(f"  {'fsync of that file':<64}{sync:>7.2f} s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=None, help="rows per data shape (6,000,000; --quick: 100,000)")
    parser.add_argument("--repeat", type=int, default=None, help="runs per system (3; --quick: 1)")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 100,000 rows, one run of each")
    parser.add_argument("--shapes", default=",".join(SHAPES), help="comma-separated subset of " + ", ".join(SHAPES))
    parser.add_argument("--cases", default=",".join(CASES), help="comma-separated subset of " + ", ".join(CASES))
    parser.add_argument("--profile", action="store_true", help="print where the time of a micro-batch and a df.write goes")
    parser.add_argument("--arrow-batch-rows", type=int, default=None,
                        help="spark.sql.execution.arrow.maxRecordsPerBatch for the session (Spark's default: 10,000)")
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
    from sparklink.testing import spark_session

    if args.rows is None:
        args.rows = QUICK_ROWS if args.quick else 6_000_000
    if args.repeat is None:
        args.repeat = 1 if args.quick else 3
    try:
        shapes = check_shapes(args.shapes)
    except ValueError as exc:
        parser.error(str(exc))
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    unknown = [c for c in cases if c not in CASES]
    if unknown:
        parser.error(f"unknown case(s) {', '.join(unknown)}; known: {', '.join(CASES)}")
    extra = {"spark.sql.session.timeZone": "UTC"}
    if args.arrow_batch_rows is not None:
        extra["spark.sql.execution.arrow.maxRecordsPerBatch"] = str(args.arrow_batch_rows)
    spark = spark_session(app_name="bench-file-sink", extra=extra)
    work = Path(tempfile.mkdtemp(prefix="bench-file-sink-"))
    try:
        if args.profile:
            source = work / "input-simple"
            write_input(spark, args.rows, source, "simple")
            profile(spark, source, work, args.rows)
            return 0
        DiscardFloor.register(spark)
        warm = work / "input-warm"  # the session's first queries are slower (JIT, Python workers): untimed
        write_input(spark, 10_000, warm, shapes[0])
        for system in SYSTEMS:
            run_case(spark, cases[0], system, warm, work)
        results: dict[tuple[str, str], dict[str, dict]] = {}
        loads = [os.getloadavg()[0]]
        for shape in shapes:
            source = work / f"input-{shape}"
            write_input(spark, args.rows, source, shape)
            for attempt in range(args.repeat):
                order = SYSTEMS if attempt % 2 == 0 else tuple(reversed(SYSTEMS))
                for case in cases:
                    for system in order:
                        run = run_case(spark, case, system, source, work)
                        loads.append(os.getloadavg()[0])
                        if run["rows"] is not None:
                            assert run["rows"] == args.rows, \
                                f"{case}/{shape}/{system}: {run['rows']} rows written, expected {args.rows}"
                        print(f"  run {attempt + 1} {case:<15}{shape:<8}{system:<10}{args.rows / run['seconds']:>12,.0f}"
                              f" rows/s  {run['files']} files, {run['row_groups']} row groups, {run['bytes']:,} bytes"
                              f"  (load {loads[-1]:.1f})", flush=True)
                        best = results.setdefault((case, shape), {}).get(system)
                        if best is None or run["seconds"] < best["seconds"]:
                            results[(case, shape)][system] = run
        print_table(results, args.rows, args.repeat, loads)
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
