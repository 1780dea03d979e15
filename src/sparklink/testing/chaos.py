"""The chaos soak behind ``make chaos``: a continuous pipeline, SIGKILLed at random moments.

A generator (in this process) keeps landing JSON files, each record with a unique ``seq``.
A driver process runs two continuous queries on the file source: one into the file sink
(Parquet) and, when PostgreSQL is available, one into the PostgreSQL two-phase sink. The soak
SIGKILLs the driver's whole process group at a random moment, restarts it from the same
checkpoints, and repeats. At the end the generator stops, a last run drains everything, and
the soak counts records in, out, duplicated and lost in each sink, and leftover prepared
transactions.

    python -m sparklink.testing.chaos --kills 20            # the documented long run
    python -m sparklink.testing.chaos --kills 3             # a short one
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from sparklink.testing.drivers import DriverProcess, run_driver
from sparklink.testing.postgres import start_postgres

SCHEMA_DDL = "seq LONG, payload STRING"
PG_TABLE = "chaos_events"


def pipeline_job(spark, *, landing: str, out: str, checkpoint: str, dsn: str | None, available_now: bool) -> None:
    """Driver job: file source -> file sink (and -> PostgreSQL two-phase)."""
    def readings():
        return (spark.readStream.format("sparklink.files").option("path", landing).option("format", "json")
                .schema(SCHEMA_DDL).option("maxFilesPerTrigger", 5).load())

    def trigger(writer):
        return writer.trigger(availableNow=True) if available_now else writer.trigger(processingTime="500 milliseconds")

    queries = [trigger(readings().writeStream.format("sparklink.files").option("path", out)
                       .option("format", "parquet").option("bucketAssigner", "basepath")
                       .option("checkpointLocation", f"{checkpoint}/files")).start()]
    if dsn:
        queries.append(trigger(readings().writeStream.format("sparklink.postgres").option("dsn", dsn)
                               .option("table", PG_TABLE).option("semantic", "two-phase")
                               .option("checkpointLocation", f"{checkpoint}/pg")).start())
    if available_now:
        for query in queries:
            query.awaitTermination()
    else:
        spark.streams.awaitAnyTermination()  # either query failing ends the run, with its error


class Generator:
    """Lands a file of ``rows`` records every ``interval`` seconds (hidden name, then rename)."""

    def __init__(self, landing: Path, rows: int, interval: float):
        self.landing, self.rows, self.interval = landing, rows, interval
        self.next_seq = 0
        self.files = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        landing.mkdir(parents=True, exist_ok=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            lines = [json.dumps({"seq": self.next_seq + i, "payload": f"event-{self.next_seq + i}"})
                     for i in range(self.rows)]
            hidden = self.landing / f".chaos-{self.files:06d}.json.tmp"
            hidden.write_text("\n".join(lines) + "\n", encoding="utf-8")
            os.rename(hidden, self.landing / f"chaos-{self.files:06d}.json")
            self.next_seq += self.rows
            self.files += 1
            self._stop.wait(self.interval)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


@dataclass
class SinkReport:
    name: str
    records_out: int
    duplicated: int
    lost: int

    def line(self) -> str:
        return f"{self.name:<12} out {self.records_out:>8}  duplicated {self.duplicated:>4}  lost {self.lost:>4}"


def _report(name: str, seqs: list[int], records_in: int) -> SinkReport:
    counts = Counter(seqs)
    duplicated = sum(n - 1 for n in counts.values() if n > 1)
    lost = sum(1 for seq in range(records_in) if seq not in counts)
    return SinkReport(name, len(seqs), duplicated, lost)


def run_chaos(*, kills: int, work: Path, dsn: str | None, min_gap: float, max_gap: float, rows_per_file: int,
              interval: float, seed: int, log=print) -> dict:
    """Run the soak; returns the figures (also printed through ``log``)."""
    import pyarrow.dataset as ds

    rng = random.Random(seed)
    landing, out, checkpoint = work / "landing", work / "out", work / "checkpoint"
    args = {"landing": str(landing), "out": str(out), "checkpoint": str(checkpoint), "dsn": dsn}
    generator = Generator(landing, rows_per_file, interval)
    generator.start()
    killed = 0
    try:
        while killed < kills:
            process = DriverProcess("sparklink.testing.chaos:pipeline_job", dict(args, available_now=False),
                                    log_path=work / "driver.log")
            wait = rng.uniform(min_gap, max_gap)
            try:
                code = process.process.wait(timeout=wait)
                raise RuntimeError(f"the pipeline ended by itself (exit {code}) after kill {killed} instead of "
                                   f"running until killed; the end of {work / 'driver.log'}:\n"
                                   f"{process.log_tail()}")
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=60)
                killed += 1
                log(f"kill {killed}/{kills} after {wait:.1f}s; {generator.next_seq} records landed so far")
    finally:
        generator.stop()
    final = run_driver("sparklink.testing.chaos:pipeline_job", dict(args, available_now=True), log_path=work / "driver.log",
                       timeout=900)
    if not final.ok:
        raise RuntimeError(f"the final drain run failed: {final.output[-3000:]}")
    records_in = generator.next_seq
    file_seqs = ds.dataset(str(out), format="parquet", ignore_prefixes=[".", "_"]).to_table(columns=["seq"])
    reports = [_report("file sink", file_seqs.column("seq").to_pylist(), records_in)]
    prepared_left = 0
    if dsn:
        import psycopg

        with psycopg.connect(dsn) as conn:
            seqs = [r[0] for r in conn.execute(f"SELECT seq FROM {PG_TABLE}").fetchall()]
            prepared_left = conn.execute("SELECT count(*) FROM pg_prepared_xacts").fetchone()[0]
        reports.append(_report("postgres 2pc", seqs, records_in))
    log(f"records in {records_in} ({generator.files} files), kills {killed}")
    for report in reports:
        log(report.line())
    if dsn:
        log(f"prepared transactions left: {prepared_left}")
    return {"records_in": records_in, "kills": killed, "prepared_left": prepared_left,
            "sinks": {r.name: {"out": r.records_out, "duplicated": r.duplicated, "lost": r.lost} for r in reports}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sparklink.testing.chaos", description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=20, help="random SIGKILLs of the driver (default 20)")
    parser.add_argument("--min-gap", type=float, default=12.0, help="shortest run before a kill, seconds (default 12)")
    parser.add_argument("--max-gap", type=float, default=30.0, help="longest run before a kill, seconds (default 30)")
    parser.add_argument("--rows-per-file", type=int, default=200)
    parser.add_argument("--interval", type=float, default=0.5, help="seconds between landed files")
    parser.add_argument("--seed", type=int, default=int(time.time()))
    parser.add_argument("--no-postgres", action="store_true", help="file sink only")
    parser.add_argument("--dir", help="working directory (default: a temporary one, removed afterwards)")
    args = parser.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    work = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="sparklink-chaos-"))
    server = None
    try:
        if not args.no_postgres:
            server = start_postgres()
        print(f"chaos soak: {args.kills} kills, seed {args.seed}, work dir {work}")
        result = run_chaos(kills=args.kills, work=work, dsn=server.dsn if server else None, min_gap=args.min_gap,
                           max_gap=args.max_gap, rows_per_file=args.rows_per_file, interval=args.interval,
                           seed=args.seed)
    finally:
        if server is not None:
            server.stop()
        if not args.dir:
            shutil.rmtree(work, ignore_errors=True)
    bad = any(s["duplicated"] or s["lost"] for s in result["sinks"].values()) or result["prepared_left"]
    print("RESULT: " + ("FAILED" if bad else "OK: 0 lost, 0 duplicated"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
