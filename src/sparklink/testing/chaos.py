"""The chaos soak behind ``make chaos``: a continuous pipeline, SIGKILLed at random moments.

A generator (in this process) keeps landing JSON files, each record with a unique ``seq``.
A driver process runs two continuous queries on the file source: one into the file sink
(Parquet) and, when PostgreSQL is available, one into the PostgreSQL two-phase sink. The soak
SIGKILLs the driver's whole process group at a random moment, restarts it from the same
checkpoints, and repeats. The moment is drawn from observed progress, not from a clock: each
run is killed once the file sink's commit log has gained a random number of micro-batches
(``--min-batches`` to ``--max-batches``) since the run started, plus a random ``--jitter`` of
up to a second so that the kill lands at any step of the micro-batch then in flight. So every
run makes progress, and a slow machine makes the soak longer, never flaky. At the end the generator stops, a last run drains everything, and
the soak counts records in, out, duplicated and lost in each sink, and leftover prepared
transactions.

Then the CDC pipeline (with PostgreSQL): ``sparklink.postgres-cdc`` on two tables -> the file
sink, while a process of its own (:mod:`sparklink.testing.cdc_changes`) keeps inserting, updating
and deleting their rows; SIGKILLed ``--cdc-kills`` times the same way (on Spark's commit log), in
the snapshot and in the log. It prints changes in (committed by the change maker), rows out,
mismatches between the output replayed in ``_lsn`` order per key and a SELECT of the tables (plus
changes missing or twice; must be 0) and the slot's lag.

    python -m sparklink.testing.chaos --kills 20            # the documented long run
    python -m sparklink.testing.chaos --kills 3             # a short one
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import random
import shutil
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparklink.files.sink.manifest import META_DIR
from sparklink.testing.class_archive import ensure_class_archive, use_class_archive
from sparklink.testing.drivers import DriverProcess, logged_batches, run_driver
from sparklink.testing.postgres import start_postgres

SCHEMA_DDL = "seq LONG, payload STRING"
PG_TABLE = "chaos_events"
CDC_TABLES = ("chaos_cdc_a", "chaos_cdc_b")
CDC_SLOT = "sparklink_chaos_cdc"


def pipeline_job(spark, *, landing: str, out: str, checkpoint: str, dsn: str | None, available_now: bool) -> None:
    """Driver job: file source -> file sink (and -> PostgreSQL two-phase). The killed runs take 5
    files per micro-batch, so that kills land among many small commits; the drain
    (``available_now``) takes 100, so that it does not replay the soak's pace."""
    max_files = 100 if available_now else 5

    def readings():
        return (spark.readStream.format("sparklink.files").option("path", landing).option("format", "json")
                .schema(SCHEMA_DDL).option("maxFilesPerTrigger", max_files).load())

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


def _logged_at_least(commits: Path, target: int) -> bool:
    return logged_batches(commits) >= target


def run_chaos(*, kills: int, work: Path, dsn: str | None, min_batches: int, max_batches: int, jitter: float,
              rows_per_file: int, interval: float, seed: int, log=print, spark=None) -> dict:
    """Run the soak; returns the figures (also printed through ``log``). The last run, which
    drains what landed, runs in ``spark`` when given (a test's own session), else in a driver
    process of its own."""
    import pyarrow.dataset as ds

    rng = random.Random(seed)
    landing, out, checkpoint = work / "landing", work / "out", work / "checkpoint"
    commits = out / META_DIR / "commits"  # the file sink's commit log: <batchId>.json per committed micro-batch
    args: dict[str, Any] = {"landing": str(landing), "out": str(out), "checkpoint": str(checkpoint), "dsn": dsn}
    generator = Generator(landing, rows_per_file, interval)
    generator.start()
    killed = 0
    try:
        while killed < kills:
            process = DriverProcess("sparklink.testing.chaos:pipeline_job", dict(args, available_now=False),
                                    log_path=work / "driver.log")
            target = logged_batches(commits) + rng.randint(min_batches, max_batches)
            delay = rng.uniform(0.0, jitter)
            process.kill_when(functools.partial(_logged_at_least, commits, target), jitter=delay, timeout=300,
                              what=f"micro-batch {target - 1} in the file sink's commit log")
            killed += 1
            log(f"kill {killed}/{kills} {delay:.2f}s after micro-batch {target - 1} was logged; "
                f"{generator.next_seq} records landed so far")
    finally:
        generator.stop()
    if spark is not None:
        pipeline_job(spark, **args, available_now=True)
    else:
        final = run_driver("sparklink.testing.chaos:pipeline_job", dict(args, available_now=True),
                           log_path=work / "driver.log", timeout=900)
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
            counted = conn.execute("SELECT count(*) FROM pg_prepared_xacts").fetchone()
            assert counted is not None  # an aggregate without GROUP BY answers one row
            prepared_left = counted[0]
        reports.append(_report("postgres 2pc", seqs, records_in))
    log(f"records in {records_in} ({generator.files} files), kills {killed}")
    for report in reports:
        log(report.line())
    if dsn:
        log(f"prepared transactions left: {prepared_left}")
    return {"records_in": records_in, "kills": killed, "prepared_left": prepared_left,
            "sinks": {r.name: {"out": r.records_out, "duplicated": r.duplicated, "lost": r.lost} for r in reports}}


def cdc_job(spark, *, dsn: str, out: str, checkpoint: str, available_now: bool) -> None:
    """Driver job: sparklink.postgres-cdc (both tables, one slot) -> file sink (json)."""
    writer = (spark.readStream.format("sparklink.postgres-cdc").option("dsn", dsn)
              .option("tables", ", ".join(f"public.{t}" for t in CDC_TABLES)).option("slotName", CDC_SLOT)
              .option("publication", f"{CDC_SLOT}_pub").option("snapshotChunkRows", "50")
              .option("maxChangesPerTrigger", "5000" if available_now else "200").load()
              .writeStream.format("sparklink.files").option("format", "json").option("rollingPolicy", "checkpoint")
              .option("path", out).option("checkpointLocation", checkpoint))
    query = writer.trigger(availableNow=True).start() if available_now else writer.start()
    query.awaitTermination()


def _spark_commits(checkpoint: Path) -> int:
    commits = checkpoint / "commits"
    return sum(1 for p in commits.iterdir() if p.name.isdigit()) if commits.exists() else 0


def _last_committed_end(checkpoint: Path) -> dict[str, Any]:
    committed = max(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
    return dict(json.loads((checkpoint / "offsets" / str(committed)).read_text().splitlines()[-1]))


def run_cdc_chaos(*, kills: int, work: Path, dsn: str, min_batches: int, max_batches: int, jitter: float,
                  seed: int, log=print) -> dict:
    """The CDC soak; returns its figures (also printed through ``log``)."""
    import subprocess

    import psycopg
    import pyarrow.dataset as ds

    rng = random.Random(seed)
    out, checkpoint, stop = work / "cdc-out", work / "cdc-checkpoint", work / "cdc-stop"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = %s",
                     [CDC_SLOT])
        for table in CDC_TABLES:
            conn.execute(f"DROP TABLE IF EXISTS {table}")
            conn.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, v text)")
            conn.execute(f"INSERT INTO {table} SELECT g, 'v' || g FROM generate_series(1, 400) g")
    args: dict[str, Any] = {"dsn": dsn, "out": str(out), "checkpoint": str(checkpoint)}
    changer: subprocess.Popen[str] | None = None
    in_snapshot = 0
    try:
        for killed in range(1, kills + 1):
            process = DriverProcess("sparklink.testing.chaos:cdc_job", dict(args, available_now=False),
                                    log_path=work / "cdc-driver.log")
            target = _spark_commits(checkpoint) + rng.randint(min_batches, max_batches)
            delay = rng.uniform(0.0, jitter)
            process.kill_when(functools.partial(lambda n: _spark_commits(checkpoint) >= n, target), jitter=delay,
                              timeout=300, what=f"micro-batch {target - 1} in Spark's commit log")
            snapshot = "snapshot" in _last_committed_end(checkpoint)
            in_snapshot += snapshot
            log(f"cdc kill {killed}/{kills} {delay:.2f}s after micro-batch {target - 1} was committed"
                f"{' (in the snapshot)' if snapshot else ''}")
            if changer is None:  # the slot exists now: every change from here on is in its log
                changer = subprocess.Popen([sys.executable, "-m", "sparklink.testing.cdc_changes", dsn, str(stop),
                                            *(f"public.{t}" for t in CDC_TABLES)], stdout=subprocess.PIPE,
                                           stderr=subprocess.STDOUT, text=True)
    finally:
        stop.touch()
        made = changer.communicate(timeout=120)[0] if changer is not None else "0"
    if changer is not None and changer.returncode != 0:
        raise RuntimeError(f"the change maker failed: {made[-3000:]}")
    final = run_driver("sparklink.testing.chaos:cdc_job", dict(args, available_now=True),
                       log_path=work / "cdc-driver.log", timeout=900)
    if not final.ok:
        raise RuntimeError(f"the final drain run of the CDC pipeline failed: {final.output[-3000:]}")
    rows = ds.dataset(str(out), format="json", ignore_prefixes=[".", "_"]).to_table().to_pylist()
    changes = [r for r in rows if r["_op"] != "r"]
    twice = len(changes) - len({(r["_table"], r["_lsn"], r["id"], r["_op"]) for r in changes})
    state: dict[tuple[str, int], str] = {}
    for r in sorted(rows, key=lambda r: r["_lsn"]):
        if r["_op"] == "d":
            state.pop((r["_table"], r["id"]), None)
        else:
            state[(r["_table"], r["id"])] = r["v"]
    with psycopg.connect(dsn, autocommit=True) as conn:
        expected = {(f"public.{t}", i): v for t in CDC_TABLES for i, v in conn.execute(f"SELECT id, v FROM {t}")}
        lag_row = conn.execute("SELECT (pg_current_wal_lsn() - confirmed_flush_lsn)::bigint, "
                               "(confirmed_flush_lsn - '0/0'::pg_lsn)::bigint FROM pg_replication_slots "
                               "WHERE slot_name = %s", [CDC_SLOT]).fetchone()
    assert lag_row is not None
    changes_in = int(made.strip() or 0)
    mismatched = sum(1 for key in set(expected) | set(state) if expected.get(key) != state.get(key))
    mismatches = mismatched + twice + abs(len(changes) - twice - changes_in)
    at_end = lag_row[1] == _last_committed_end(checkpoint)["lsn"]
    log(f"cdc: changes in {changes_in}, rows out {len(rows)} ({len(rows) - len(changes)} snapshot, "
        f"{len(changes)} changes), kills {kills} ({in_snapshot} in the snapshot)")
    log(f"cdc: mismatches {mismatches} (keys differing from the tables {mismatched}, changes twice {twice})")
    log(f"cdc: slot lag {lag_row[0]} bytes behind the server's WAL; slot at the last committed batch's end: "
        f"{'yes' if at_end else 'NO'}")
    return {"changes_in": changes_in, "rows_out": len(rows), "mismatches": mismatches, "slot_lag": lag_row[0],
            "slot_at_last_batch": at_end, "kills": kills}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sparklink.testing.chaos", description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=20, help="random SIGKILLs of the driver (default 20)")
    parser.add_argument("--min-batches", type=int, default=1,
                        help="fewest micro-batches a run commits before it is killed (default 1)")
    parser.add_argument("--max-batches", type=int, default=6,
                        help="most micro-batches a run commits before it is killed (default 6)")
    parser.add_argument("--jitter", type=float, default=1.0,
                        help="the kill comes up to this many seconds after the last counted commit (default 1)")
    parser.add_argument("--rows-per-file", type=int, default=200)
    parser.add_argument("--interval", type=float, default=0.5, help="seconds between landed files")
    parser.add_argument("--seed", type=int, default=int(time.time()))
    parser.add_argument("--no-postgres", action="store_true", help="file sink only (and no CDC pipeline)")
    parser.add_argument("--cdc-kills", type=int, default=20,
                        help="random SIGKILLs of the CDC pipeline's driver (default 20; 0: no CDC pipeline)")
    parser.add_argument("--dir", help="working directory (default: a temporary one, removed afterwards)")
    args = parser.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    archive = ensure_class_archive()  # faster driver restarts; without it the soak runs as before
    if archive is not None:
        use_class_archive(archive)
    work = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="sparklink-chaos-"))
    server = None
    try:
        if not args.no_postgres:
            server = start_postgres()
        print(f"chaos soak: {args.kills} kills, seed {args.seed}, work dir {work}")
        result = run_chaos(kills=args.kills, work=work, dsn=server.dsn if server else None, min_batches=args.min_batches,
                           max_batches=args.max_batches, jitter=args.jitter, rows_per_file=args.rows_per_file, interval=args.interval,
                           seed=args.seed)
        if server is not None and args.cdc_kills:
            result["cdc"] = run_cdc_chaos(kills=args.cdc_kills, work=work, dsn=server.dsn,
                                          min_batches=args.min_batches, max_batches=args.max_batches,
                                          jitter=args.jitter, seed=args.seed)
    finally:
        if server is not None:
            server.stop()
        if not args.dir:
            shutil.rmtree(work, ignore_errors=True)
    bad = any(s["duplicated"] or s["lost"] for s in result["sinks"].values()) or result["prepared_left"]
    cdc = result.get("cdc")
    bad = bad or bool(cdc and (cdc["mismatches"] or not cdc["slot_at_last_batch"]))
    print("RESULT: " + ("FAILED" if bad else "OK: 0 lost, 0 duplicated" + (", 0 CDC mismatches" if cdc else "")))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
