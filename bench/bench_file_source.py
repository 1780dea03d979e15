"""Benchmark: sparklink.files vs Spark's built-in file source, on the same files, in one run.

Parquet and CSV, one large file and many small files, on two data shapes (``--shapes``):

  simple  ``id`` long, ``name`` string of 1,000 distinct values, ``score = id * 0.5`` (the rows of
          the first version of this bench);
  users   ``id``, ``k`` a high-cardinality string (about one distinct value per row), ``v``
          random doubles, ``amount`` decimal(12,2), ``event_time`` random timestamps within a day;
          ``k``, ``v`` and ``amount`` are null in about 3 % of the rows each.

Each case runs three readers on the same rows, alternating, and keeps the best of ``--runs``:
Spark's built-in source, ``sparklink.files``, and the floor: a Python data source whose reader
yields the same rows as Arrow batches from memory (an Arrow IPC file mapped into memory, 65,536
rows a batch, two partitions), what any Python source pays for the hand-over to Spark before
it reads a byte. The table gives rows/s of each, the ratio to Spark (> 1: sparklink faster)
and sparklink's time over the floor's (1.00: reading and decoding cost nothing), and the CPU
seconds of the JVM and its Python workers, which do not depend on how busy the machine is.
It also times the per-trigger discovery of the file source's enumerator with 100,000
already-read files present (incremental listing, and a full listing as after a restart).

The action is the same for every reader: a write of every row to Spark's ``noop`` sink. A
``count()`` or ``sum(id)`` would let Spark's built-in Parquet reader skip decoding the other
columns (column pruning), which a Python data source cannot do, so it would not compare the
same work.

    PYSPARK_PYTHON=.venv/bin/python .venv/bin/python bench/bench_file_source.py [--small-files 2000]
    PYSPARK_PYTHON=.venv/bin/python .venv/bin/python bench/bench_file_source.py --quick   # smoke run
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_data import SCHEMAS, SHAPES, check_shapes, make_files, make_table  # noqa: E402
from process_cpu import descendants_cpu  # noqa: E402
from query_times import QueryTimes, run_available_now  # noqa: E402

FLOOR_BATCH_ROWS = 65_536


def make_data(root: Path, shape: str, large_rows: int, small_files: int, small_rows: int) -> dict[str, Path]:
    """Per case (format, large or small) the directory both readers read (:func:`bench_data.make_files`),
    and beside it the floor's Arrow IPC file of the same rows."""
    paths = make_files(root, shape, large_rows, small_files, small_rows)
    table = make_table(shape, large_rows)
    piece = table.slice(0, small_rows)
    for size, rows in (("large", table), ("small", pa.concat_tables([piece] * small_files))):
        write_floor_file(rows, root / f"{shape}-{size}.arrow")
    return paths


def write_floor_file(table: pa.Table, path: Path) -> None:
    """``table`` as the floor's Arrow IPC file (batches of FLOOR_BATCH_ROWS rows)."""
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        for batch in table.to_batches(max_chunksize=FLOOR_BATCH_ROWS):
            writer.write_batch(batch)


class _MemoryFloor:
    """The floor: a Python data source, ``bench.memory``, whose readers yield the Arrow batches of
    a memory-mapped IPC file (:func:`write_floor_file`), split over two partitions: ``spark.read``
    reads it at once, ``spark.readStream`` in one micro-batch. Built lazily so that importing this
    module does not need PySpark."""

    registered = False

    @classmethod
    def register(cls, spark) -> None:
        if cls.registered:
            return
        from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
        from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow

        halves = [InputPartition(0), InputPartition(1)]

        def batches(path: str, partition):
            with pa.memory_map(path) as source:
                reader = pa.ipc.open_file(source)
                for index in range(partition.value, reader.num_record_batches, 2):
                    yield reader.get_batch(index)

        class MemoryReader(DataSourceReader):
            def __init__(self, path: str):
                self.path = path

            def partitions(self):
                return halves

            def read(self, partition):
                return batches(self.path, partition)

        class MemoryStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
            """All the rows in the first micro-batch, none after."""

            def __init__(self, path: str):
                self.path = path

            def initialOffset(self):
                return {"read": 0}

            def latestOffset(self, start=None, limit=None):
                return {"read": 1}

            def prepareForTriggerAvailableNow(self):
                pass

            def partitions(self, start, end):
                return halves if start["read"] < end["read"] else []

            def read(self, partition):
                return batches(self.path, partition)

            def commit(self, end):
                pass

        class MemoryFloor(DataSource):
            @classmethod
            def name(cls):
                return "bench.memory"

            def schema(self):
                return self.options["schema"]

            def reader(self, schema):
                return MemoryReader(self.options["path"])

            def streamReader(self, schema):
                return MemoryStreamReader(self.options["path"])

        spark.dataSource.register(MemoryFloor)
        cls.registered = True


class _PyarrowParquet:
    """The decoding floor of the Parquet cases: a Python data source, ``bench.pyarrow``, whose two
    readers each decode a contiguous half of one Parquet file's row groups with pyarrow alone
    (``ParquetFile.iter_batches``, no sparklink code) and hand the batches over. A local path is
    memory-mapped; with the option ``endpoint`` the path is ``bucket/key`` on that S3 server, read
    by pyarrow's ``S3FileSystem`` with its pre-buffering (coalesced ranged GETs). What the most
    direct Python Parquet reader costs: the hand-over of :class:`_MemoryFloor` plus pyarrow's
    own fetching and decoding. Built lazily, as the memory floor is."""

    registered = False

    @classmethod
    def register(cls, spark) -> None:
        if cls.registered:
            return
        from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

        def open_file(options):
            import pyarrow.parquet as pq

            if "endpoint" not in options:
                return pq.ParquetFile(options["path"], memory_map=True)
            from pyarrow.fs import S3FileSystem

            filesystem = S3FileSystem(endpoint_override=options["endpoint"], scheme="http",
                                      access_key=options["accessKey"], secret_key=options["secretKey"],
                                      region="us-east-1")
            return pq.ParquetFile(filesystem.open_input_file(options["path"]), pre_buffer=True)

        class PyarrowReader(DataSourceReader):
            def __init__(self, options, schema):
                self.options = options  # case-insensitive, as Spark passes them
                self.schema = schema

            def partitions(self):
                with open_file(self.options) as handle:
                    groups = handle.num_row_groups
                return [InputPartition(list(range(0, groups // 2))), InputPartition(list(range(groups // 2, groups)))]

            def read(self, partition):
                from pyspark.sql.pandas.types import to_arrow_schema

                target = to_arrow_schema(self.schema, timezone="UTC")  # as PySpark checks the batches
                with open_file(self.options) as handle:
                    for batch in handle.iter_batches(batch_size=FLOOR_BATCH_ROWS, row_groups=partition.value,
                                                     use_threads=False):
                        yield batch if batch.schema.equals(target) else batch.cast(target)

        class PyarrowParquet(DataSource):
            @classmethod
            def name(cls):
                return "bench.pyarrow"

            def schema(self):
                return self.options["schema"]

            def reader(self, schema):
                return PyarrowReader(self.options, schema)

        spark.dataSource.register(PyarrowParquet)
        cls.registered = True


def streaming_floor_frame(spark, table, path: Path, ddl: str):
    """The streaming floor (bench_iceberg, bench_delta): ``table``'s rows (an Arrow table, made
    untimed) in the Arrow IPC file ``path``, handed to Spark by the floor's source as a stream
    that yields them from memory in one micro-batch; ``ddl``: their Spark schema. What any Python
    streaming source pays per query (PySpark plans it in a Python process started for the query)
    and to hand these rows over, before it opens a table."""
    write_floor_file(table, path)
    _MemoryFloor.register(spark)
    return spark.readStream.format("bench.memory").option("schema", ddl).option("path", str(path)).load()


def time_streaming_floor(frame, checkpoint: Path, rows: int) -> QueryTimes:
    """One availableNow query of the streaming floor into ``noop``, timed whole and per micro-batch
    (every row checked)."""
    times = run_available_now(frame.writeStream.format("noop").option("checkpointLocation", str(checkpoint)))
    assert times.rows == rows
    return times



def _cpu_seconds() -> float:
    """CPU time (user + system) of this process's descendants: the JVM and its Python workers."""
    return sum(seconds for _, seconds in descendants_cpu().values())


def timed_noop(frame) -> tuple[float, float]:
    """Wall seconds and CPU seconds of writing every row and column to the noop sink."""
    cpu, started = _cpu_seconds(), time.perf_counter()
    frame.write.format("noop").mode("overwrite").save()
    return time.perf_counter() - started, _cpu_seconds() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--large-rows", type=int, default=None, help="rows of the large file (3,000,000; --quick: 100,000)")
    parser.add_argument("--small-files", type=int, default=None, help="small files (2,000; --quick: 200)")
    parser.add_argument("--small-rows", type=int, default=100)
    parser.add_argument("--listing-files", type=int, default=None, help="already-read files (100,000; --quick: 10,000)")
    parser.add_argument("--runs", type=int, default=None, help="runs per reader (3; --quick: 1)")
    parser.add_argument("--quick", action="store_true", help="a smoke run: small inputs, one run of each")
    parser.add_argument("--shapes", default=",".join(SHAPES), help="comma-separated subset of " + ", ".join(SHAPES))
    args = parser.parse_args()
    for name, full, quick in (("large_rows", 3_000_000, 100_000), ("small_files", 2_000, 200),
                              ("listing_files", 100_000, 10_000), ("runs", 3, 1)):
        if getattr(args, name) is None:
            setattr(args, name, quick if args.quick else full)
    try:
        args.shapes = check_shapes(args.shapes)
    except ValueError as exc:
        parser.error(str(exc))
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
    from sparklink.testing import spark_session

    spark = spark_session(app_name="bench-file-source", extra={"spark.sql.session.timeZone": "UTC"})
    root = Path(tempfile.mkdtemp(prefix="bench-fs-"))
    try:
        run(spark, root, args)
    finally:
        spark.stop()
        shutil.rmtree(root)


def run(spark, root: Path, args: argparse.Namespace) -> None:
    _MemoryFloor.register(spark)
    loads = [os.getloadavg()[0]]
    results = []
    for shape in args.shapes:
        paths = make_data(root, shape, args.large_rows, args.small_files, args.small_rows)
        schema = SCHEMAS[shape]
        for case, path in paths.items():
            fmt, size = case.split("-")

            def builtin(fmt=fmt, path=path, schema=schema):
                reader = spark.read.format(fmt)
                return (reader.schema(schema) if fmt == "csv" else reader).load(str(path))

            def ours(fmt=fmt, path=path, schema=schema):
                reader = spark.read.format("sparklink.files").option("path", str(path)).option("format", fmt)
                return (reader.schema(schema) if fmt == "csv" else reader).load()

            def floor(size=size, shape=shape, schema=schema):
                return (spark.read.format("bench.memory").option("path", str(root / f"{shape}-{size}.arrow"))
                        .option("schema", schema).load())

            readers = {"spark": builtin, "sparklink": ours, "floor": floor}
            rows = builtin().count()
            assert ours().count() == rows == floor().count(), case
            for make in readers.values():  # warm-up (JVM, Python workers)
                timed_noop(make())
            runs: dict[str, list[tuple[float, float]]] = {name: [] for name in readers}
            for attempt in range(args.runs):
                order = list(readers) if attempt % 2 == 0 else list(reversed(readers))
                for name in order:
                    runs[name].append(timed_noop(readers[name]()))
                    loads.append(os.getloadavg()[0])
            best = {name: (min(w for w, _ in found), min(c for _, c in found)) for name, found in runs.items()}
            results.append((case, shape, rows, best))
            (t_spark, _), (t_ours, _), (t_floor, _) = best["spark"], best["sparklink"], best["floor"]
            print(f"  {case:<14}{shape:<8}spark {rows / t_spark:>12,.0f}  sparklink {rows / t_ours:>12,.0f}  "
                  f"floor {rows / t_floor:>12,.0f} rows/s  (load {loads[-1]:.1f})", flush=True)
    print(f"\nbest of {args.runs} alternating runs, local[2], {os.cpu_count()} cores; load average (1 min) during the "
          f"runs {min(loads):.1f}-{max(loads):.1f}")
    header = (f"{'case':<15}{'shape':<8}{'sparklink/s':>13}{'Spark/s':>12}{'floor/s':>12}{'vs Spark':>9}{'vs floor':>9}"
              f"{'cpu s':>7}{'Spark cpu':>10}{'floor cpu':>10}")
    print(header)
    print("-" * len(header))
    for case, shape, rows, best in results:
        (t_spark, c_spark), (t_ours, c_ours), (t_floor, c_floor) = best["spark"], best["sparklink"], best["floor"]
        print(f"{case:<15}{shape:<8}{rows / t_ours:>13,.0f}{rows / t_spark:>12,.0f}{rows / t_floor:>12,.0f}"
              f"{t_spark / t_ours:>9.2f}{t_ours / t_floor:>9.2f}{c_ours:>7.2f}{c_spark:>10.2f}{c_floor:>10.2f}",
              flush=True)
    print("vs Spark: Spark's time / sparklink's (> 1: sparklink faster); vs floor: sparklink's time / the floor's "
          "(a Python reader yielding the same rows as Arrow batches from memory; 1.00: reading costs nothing)")

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
