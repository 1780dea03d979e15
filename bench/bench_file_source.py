"""Benchmark: sparklink.files vs Spark's built-in file source, on the same files, in one run.

Parquet and CSV, one large file and many small files: rows/s of a full read, the ratio
sparklink/Spark, and the per-trigger discovery time of the file source's enumerator with
100,000 already-read files present (incremental listing, and a full listing as after a restart).

The action is the same for both sources: a write of every row to Spark's ``noop`` sink. A
``count()`` or ``sum(id)`` would let Spark's built-in Parquet reader skip decoding the other
columns (column pruning), which a Python data source cannot do, so it would not compare the
same work. Runs alternate (Spark, sparklink, Spark, ...) and the best of ``--runs`` is kept,
because this machine is shared; the CPU seconds of the JVM and its Python workers are printed
too, as they do not depend on how busy the machine is.

    PYSPARK_PYTHON=.venv/bin/python .venv/bin/python bench/bench_file_source.py [--small-files 2000]
"""

from __future__ import annotations

import argparse
import os
import shutil
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


def _cpu_seconds() -> float:
    """CPU time (user + system) of this process's descendants: the JVM and its Python workers."""
    tick = os.sysconf("SC_CLK_TCK")
    parents: dict[int, int] = {}
    cpu: dict[int, float] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as handle:
                fields = handle.read().rpartition(")")[2].split()
        except OSError:  # the process ended while we looked
            continue
        parents[int(name)] = int(fields[1])
        cpu[int(name)] = (int(fields[11]) + int(fields[12])) / tick
    total, frontier = 0.0, [os.getpid()]
    while frontier:
        parent = frontier.pop()
        for pid, ppid in parents.items():
            if ppid == parent:
                total += cpu[pid]
                frontier.append(pid)
    return total


def timed_noop(frame) -> tuple[float, float]:
    """Wall seconds and CPU seconds of writing every row and column to the noop sink."""
    cpu, started = _cpu_seconds(), time.perf_counter()
    frame.write.format("noop").mode("overwrite").save()
    return time.perf_counter() - started, _cpu_seconds() - cpu


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--large-rows", type=int, default=3_000_000)
    parser.add_argument("--small-files", type=int, default=2_000)
    parser.add_argument("--small-rows", type=int, default=100)
    parser.add_argument("--listing-files", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", os.sys.executable)
    from sparklink.testing import spark_session

    spark = spark_session(app_name="bench-file-source")
    root = Path(tempfile.mkdtemp(prefix="bench-fs-"))
    try:
        run(spark, root, args)
    finally:
        spark.stop()
        shutil.rmtree(root)


def run(spark, root: Path, args: argparse.Namespace) -> None:
    paths = make_data(root, args.large_rows, args.small_files, args.small_rows)
    print(f"load average at start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(f"{'case':<16}{'spark rows/s':>14}{'sparklink rows/s':>18}{'ratio':>7}"
          f"{'spark cpu s':>13}{'sparklink cpu s':>17}{'cpu ratio':>11}")
    for case, path in paths.items():
        fmt = case.split("-")[0]

        def builtin(fmt=fmt, path=path):
            reader = spark.read.format(fmt)
            return (reader.schema(SCHEMA) if fmt == "csv" else reader).load(str(path))

        def ours(fmt=fmt, path=path):
            reader = spark.read.format("sparklink.files").option("path", str(path)).option("format", fmt)
            return (reader.schema(SCHEMA) if fmt == "csv" else reader).load()

        rows = builtin().count()
        assert ours().count() == rows, case
        timed_noop(builtin())  # warm-up (JVM, Python workers)
        timed_noop(ours())
        spark_runs, our_runs = [], []
        for _ in range(args.runs):
            spark_runs.append(timed_noop(builtin()))
            our_runs.append(timed_noop(ours()))
        (t_spark, _), (t_ours, _) = min(spark_runs), min(our_runs)
        c_spark, c_ours = min(c for _, c in spark_runs), min(c for _, c in our_runs)
        print(f"{case:<16}{rows / t_spark:>14,.0f}{rows / t_ours:>18,.0f}{t_spark / t_ours:>7.2f}"
              f"{c_spark:>13.2f}{c_ours:>17.2f}{c_spark / c_ours:>11.2f}", flush=True)
    print(f"load average at end of reads: {os.getloadavg()[0]:.1f}")

    from sparklink.files.source.config import FileSourceConfig
    from sparklink.files.source.enumerator import FileSplitEnumerator
    from sparklink.source import ReadLimit

    listing = root / "listing"
    for d in range(20):
        directory = listing / f"d{d:02d}"
        directory.mkdir(parents=True)
        for i in range(args.listing_files // 20):
            fd = os.open(directory / f"f{i:06d}.txt", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            os.write(fd, b"x\n")
            os.close(fd)
    config = FileSourceConfig(paths=(str(listing),), format="text", min_file_age=0.0)
    enumerator = FileSplitEnumerator(config, streaming=True)
    time.sleep(0.2)
    started = time.perf_counter()
    position = enumerator.latest_offset(enumerator.initial_offset(), ReadLimit(max_files=10**9))
    first = time.perf_counter() - started
    incremental, full = [], []
    for _ in range(3):  # every file already processed: the steady-state cost of one trigger
        started = time.perf_counter()
        assert enumerator.latest_offset(position, ReadLimit(max_files=1000)) == position
        incremental.append(time.perf_counter() - started)
        restarted = FileSplitEnumerator(config, streaming=True)  # a new process: no memory of directories
        started = time.perf_counter()
        assert restarted.latest_offset(position, ReadLimit(max_files=1000)) == position
        full.append(time.perf_counter() - started)
    print(f"discovery per trigger with {args.listing_files:,} processed files present: "
          f"{min(incremental) * 1000:.1f} ms incremental (best of 3), {min(full) * 1000:.0f} ms full listing "
          f"(first trigger after a restart), {first * 1000:.0f} ms first listing + admission of all; "
          f"offset size {len(str(position))} bytes; load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
