"""Benchmark: the ``sparklink.delta`` sink and source against Delta Lake's own Spark connector
(the peer), the file sink and delta-rs alone.

    PYSPARK_PYTHON=.venv/bin/python .venv/bin/python bench/bench_delta.py                 # 1,000,000 rows
    PYSPARK_PYTHON=.venv/bin/python .venv/bin/python bench/bench_delta.py --rows 100000 --repeat 1

The input, rows of one shape of bench_data.py (``--shape``, ``simple`` by default), is written once
as Parquet before anything is timed, and one untimed query into ``sparklink.delta`` warms the session up. Cases, each timed from ``start()`` to the end of ``awaitTermination()`` (one
availableNow micro-batch: planning, tasks, commit), best of ``--repeat``:

  delta       ``readStream.parquet`` -> ``sparklink.delta`` (a new table)
  files       ``readStream.parquet`` -> ``sparklink.files`` (Parquet, one bucket)
  deltalake   the same rows as one Arrow table in this process -> ``deltalake.write_deltalake``
              (a new table; the library's own limit, without Spark; reading the input not timed)
  delta-spark the peer: ``readStream.parquet`` -> ``writeStream.format("delta")`` (Delta 4.4.0's
              connector, in its own driver process on PySpark 4.2.0, the newest Spark it serves:
              see sparklink.testing.peers), one availableNow micro-batch timed the same way
              after an untimed warm-up query in that process

The source half (``--half source`` or ``both``): the same rows written once by delta-rs as a
Delta table of ``--files`` versions (one data file each), then

  source      ``readStream.format("sparklink.delta")`` (its initial snapshot, one availableNow
              micro-batch) -> ``noop``, timed from ``start()`` to the end of ``awaitTermination()``
  dataset     ``DeltaTable(path).to_pyarrow_dataset().to_table()`` in this process (every column
              scanned; the library's own limit, without Spark)
  delta-spark the peer: ``readStream.format("delta")`` (its initial snapshot) -> ``noop``, in the
              peer's process as above
  deltalake   the same table -> ``bench.deltalake`` (bench/library_sources.py): the most direct
              Python streaming source on deltalake, no sparklink code (its planning opens the table
              and lists ``file_uris()``; two tasks decode the data files with pyarrow) -> ``noop``:
              what deltalake and the hand-over cost a Python Delta source
  floor       the same rows (the dataset's scan, untimed, in an Arrow IPC file) -> a Python streaming
              source yielding them from memory -> ``noop`` (``bench_file_source.streaming_floor_frame``):
              what any Python streaming source pays per query and to hand these rows over

Beside each sink's time: the data files, Parquet row groups and bytes of the table it made (the
upsert half: the data files and bytes of each table after its run).

The upsert half (``--half upsert``): a table of ``--keys`` keys (written by delta-rs, untimed),
then ``--batches`` changelog files, each changing ``--changed`` of the keys (80 % updates, 10 %
deletes, 10 % inserts of new keys, a sequence column), then, each into its own copy of the table

  upsert      ``readStream.parquet`` (one file per micro-batch) -> ``sparklink.delta``
              ``writeMode=upsert`` (keyColumns, opColumn, sequenceColumn): changes/s over all
              micro-batches, timed from ``start()`` to the end of ``awaitTermination()``, after
              an untimed warm-up query of the first file alone into another copy
  delta-spark the peer: Delta 4.4's Spark connector (PySpark 4.2, its own driver process), what its
              users write: ``readStream.parquet`` of the same files (one per micro-batch) ->
              ``foreachBatch``: the batch reduced to its last change per key (``row_number``
              over a window by key, greatest ``seq``) -> ``DeltaTable.forPath(...).merge`` on
              ``t.id = s.id`` (delete where ``op = 'd'``, update, insert where not a delete; the
              matched clauses where ``s.seq >= t.seq``, as sparklink's), each MERGE idempotent
              through the session settings ``spark.databricks.delta.write.txnAppId`` /
              ``txnVersion`` (the batch id); timed the same way after the same warm-up in that
              process (peer_job's ``merge`` step). Its final table must equal sparklink's (ids
              and values, read by delta-rs) and hold the last batch id as its ``txn`` version:
              a difference is printed as MISMATCH and the benchmark exits 1
  append      Spark's share: the same changelog files appended by ``sparklink.delta`` into a new
              table the same way (one file per micro-batch), no merge
  merge       the floor: the same changes, already one Arrow table per batch in this process,
              into a copy of the same table with delta-rs's ``merge`` (the same clauses); where
              its time goes, from delta-rs's metrics: scan (finding the touched files), rewrite
              (writing them again with the changes), the rest (planning and the commit)
  sink        sparklink's own part of ``upsert`` without Spark: the sink's tasks (two per batch)
              staging the same changes and its committer (read, reduce, MERGE, commit) called in
              this process as Spark's adapter calls them, into another copy of the table
  reduce      sparklink's ``Changelog.reduce`` of one batch in this process (part of ``sink``)

The load average is printed beside the figures: on a shared machine the ratios are the
meaningful numbers.
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

import bench_data  # noqa: E402
from bench_file_source import streaming_floor_frame, time_streaming_floor  # noqa: E402
from library_sources import library_source_frame  # noqa: E402
from query_times import Best, QueryTimes, run_available_now  # noqa: E402

SCHEMA = bench_data.SCHEMAS["simple"]


def write_input(path: Path, rows: int, shape: str) -> None:
    global SCHEMA
    SCHEMA = bench_data.SCHEMAS[shape]
    path.mkdir(parents=True)
    pq.write_table(bench_data.make_table(shape, rows), path / "input.parquet")


def delta_quality(table: Path) -> tuple[int, int, int]:
    """(data files, Parquet row groups, bytes) of a local Delta table's current version."""
    from deltalake import DeltaTable

    files = [Path(uri.removeprefix("file://")) for uri in DeltaTable(str(table)).file_uris()]
    return len(files), sum(pq.ParquetFile(f).metadata.num_row_groups for f in files), sum(f.stat().st_size for f in files)


def peer_times(source: Path, work: Path, rows: int, repeat: int, half: str, table: Path | None) -> Best:
    """The peer's best times (Delta's Spark connector in its own driver process), whole queries
    and micro-batches: ``sink`` and ``source`` as asked by ``half``; each after an untimed warm-up
    query in that process."""
    from sparklink.testing.peers import delta_conf, run_peer

    parquet = {"format": "parquet", "path": str(source), "schema": SCHEMA}
    steps, names = [], []
    if half in ("sink", "both"):
        for run in range(repeat + 1):
            steps.append({"op": "stream", "source": parquet, "checkpoint": str(work / f"ck-peer-sink-{run}"),
                          "sink": {"format": "delta", "path": str(work / f"delta-spark-{run}")}})
            names.append("sink" if run else "warm")
    if half in ("source", "both") and table is not None:
        for run in range(repeat + 1):
            steps.append({"op": "stream", "source": {"format": "delta", "path": str(table)}, "sink": {"format": "noop"},
                          "checkpoint": str(work / f"ck-peer-source-{run}")})
            names.append("source" if run else "warm")
    best = Best()
    for name, value in zip(names, run_peer("spark-delta", delta_conf(), steps, short_lived=False).values, strict=True):
        assert value["rows"] == rows, value
        if name != "warm":
            best.add(name, value["seconds"], value["batch_seconds"])
    return best


def time_stream(spark, source: Path, fmt: str, out: Path, checkpoint: Path, options: dict) -> QueryTimes:
    frame = spark.readStream.schema(SCHEMA).parquet(str(source))
    writer = frame.writeStream.format(fmt).option("path", str(out)).option("checkpointLocation", str(checkpoint))
    return run_available_now(writer.options(**options))


def time_deltalake(source: Path, out: Path) -> float:
    from deltalake import write_deltalake

    table = pq.read_table(source)
    start = time.perf_counter()
    write_deltalake(str(out), table)
    return time.perf_counter() - start


def write_delta_input(source: Path, out: Path, files: int) -> None:
    from deltalake import write_deltalake

    table = pq.read_table(source)
    step = -(-table.num_rows // files)
    for start in range(0, table.num_rows, step):
        write_deltalake(str(out), table.slice(start, step), mode="append")


def time_source(spark, table: Path, checkpoint: Path) -> QueryTimes:
    frame = spark.readStream.format("sparklink.delta").option("path", str(table)).load()
    return run_available_now(frame.writeStream.format("noop").option("checkpointLocation", str(checkpoint)))


def time_dataset(table: Path, rows: int) -> float:
    from deltalake import DeltaTable

    start = time.perf_counter()
    scanned = DeltaTable(str(table)).to_pyarrow_dataset().to_table()
    seconds = time.perf_counter() - start
    assert scanned.num_rows == rows
    return seconds


UPSERT_SCHEMA = "id long, v string, op string, seq long"


def write_upsert_input(work: Path, keys: int, changed: float, batches: int) -> tuple[Path, Path, list]:
    """The base table (delta-rs) and one changelog Parquet file per batch; returns the table,
    the changelog directory and the batches as Arrow tables."""
    import numpy as np
    import pyarrow as pa
    from deltalake import write_deltalake

    rng = np.random.default_rng(40)
    base = work / "upsert-base"
    write_deltalake(str(base), pa.table({"id": np.arange(keys, dtype=np.int64),
                                         "v": pa.array([f"v{i}" for i in range(keys)]),
                                         "seq": np.zeros(keys, dtype=np.int64)}))
    changes_dir = work / "upsert-in"
    changes_dir.mkdir()
    count = int(keys * changed)
    tables, next_key = [], keys
    for batch in range(batches):
        touched = rng.choice(keys, size=count - count // 10, replace=False).astype(np.int64)
        new = np.arange(next_key, next_key + count // 10, dtype=np.int64)
        next_key += len(new)
        ids = np.concatenate([touched, new])
        ops = np.where(np.arange(len(ids)) < count // 10, "d", "u").astype(object)
        ops[len(touched):] = "c"
        table = pa.table({"id": ids, "v": pa.array([f"b{batch}-{i}" for i in range(len(ids))]),
                          "op": pa.array(ops, pa.string()),
                          "seq": np.full(len(ids), batch + 1, dtype=np.int64)})
        pq.write_table(table, changes_dir / f"changes-{batch:03d}.parquet")
        os.utime(changes_dir / f"changes-{batch:03d}.parquet", (1_700_000_000 + batch,) * 2)
        tables.append(table)
    return base, changes_dir, tables


def time_upsert_stream(spark, changes_dir: Path, table: Path, checkpoint: Path, upsert: bool = True) -> float:
    frame = spark.readStream.schema(UPSERT_SCHEMA).option("maxFilesPerTrigger", 1).parquet(str(changes_dir))
    writer = (frame.writeStream.format("sparklink.delta").option("path", str(table))
              .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True))
    if upsert:
        writer = (writer.option("writeMode", "upsert").option("keyColumns", "id").option("opColumn", "op")
                  .option("sequenceColumn", "seq"))
    start = time.perf_counter()
    writer.start().awaitTermination()
    return time.perf_counter() - start


PEER_APP_ID = "bench-delta-peer-merge"


def peer_upsert(work: Path, changes_dir: Path, warm_dir: Path, table: Path, warm_table: Path) -> dict:
    """The peer of ``upsert``: Delta's Spark connector in its own driver process (PySpark 4.2,
    see sparklink.testing.peers), ``readStream.parquet`` of the same changelog files (one per
    micro-batch) -> ``foreachBatch`` -> each batch reduced to its last change per key and applied
    by ``DeltaTable.forPath(...).merge`` with the same clauses, idempotent through the session
    settings ``spark.databricks.delta.write.txnAppId`` / ``txnVersion`` (peer_job's ``merge``
    step); after an untimed warm-up query of the first file into another copy of the table.
    Returns the timed query's ``{"seconds", "rows", "batches"}``."""
    from sparklink.testing.peers import delta_conf, run_peer

    steps = [{"op": "merge", "source": {"format": "parquet", "path": str(directory), "schema": UPSERT_SCHEMA,
                                        "options": {"maxFilesPerTrigger": "1"}},
              "checkpoint": str(work / f"ck-peer-merge-{name}"), "path": str(target), "keys": ["id"],
              "columns": ["id", "v", "seq"], "opColumn": "op", "deletes": ["d"], "sequence": "seq",
              "txnAppId": PEER_APP_ID}
             for name, directory, target in (("warm", warm_dir, warm_table), ("timed", changes_dir, table))]
    return run_peer("spark-delta", delta_conf(), steps, timeout=3600, short_lived=False).values[1]


def same_rows(expected, actual) -> list[str]:
    """How two tables of (id, v, seq) differ by id: empty when they hold the same rows."""
    ours = dict(zip(expected.column("id").to_pylist(), zip(expected.column("v").to_pylist(),
                                                           expected.column("seq").to_pylist(), strict=True),
                    strict=True))
    theirs = dict(zip(actual.column("id").to_pylist(), zip(actual.column("v").to_pylist(),
                                                           actual.column("seq").to_pylist(), strict=True),
                      strict=True))
    problems = []
    if len(ours) != expected.num_rows or len(theirs) != actual.num_rows:
        problems.append(f"duplicate ids: {expected.num_rows - len(ours)} in sparklink's table, "
                        f"{actual.num_rows - len(theirs)} in the peer's")
    only_ours, only_theirs = sorted(ours.keys() - theirs.keys()), sorted(theirs.keys() - ours.keys())
    differ = sorted(k for k in ours.keys() & theirs.keys() if ours[k] != theirs[k])
    for label, ids in (("only in sparklink's table", only_ours), ("only in the peer's table", only_theirs),
                       ("with other values", differ)):
        if ids:
            problems.append(f"{len(ids)} ids {label}, e.g. {ids[:5]}")
    return problems


def time_merge_floor(table: Path, batches: list) -> tuple[float, dict[str, float]]:
    """delta-rs's own merge of each batch (already reduced: one change per key); seconds and
    the summed scan / rewrite / rest times of its metrics."""
    import pyarrow.compute as pc
    from deltalake import DeltaTable

    total, parts = 0.0, {"scan": 0.0, "rewrite": 0.0, "rest": 0.0}
    for changes in batches:
        source = changes.select(["id", "v", "seq"]).append_column("d", pc.equal(changes.column("op"), "d"))
        start = time.perf_counter()
        metrics = (DeltaTable(str(table)).merge(source, "t.id = s.id", source_alias="s", target_alias="t",
                                                streamed_exec=False)
                   .when_matched_delete(predicate="s.d AND s.seq >= t.seq")
                   .when_matched_update(updates={"v": "s.v", "seq": "s.seq"}, predicate="NOT s.d AND s.seq >= t.seq")
                   .when_not_matched_insert(updates={"id": "s.id", "v": "s.v", "seq": "s.seq"}, predicate="NOT s.d")
                   .execute())
        total += time.perf_counter() - start
        scan, rewrite = metrics.get("scan_time_ms", 0) / 1000, metrics.get("rewrite_time_ms", 0) / 1000
        parts["scan"] += scan
        parts["rewrite"] += rewrite
        parts["rest"] += metrics.get("execution_time_ms", 0) / 1000 - scan - rewrite
    return total, parts


def time_sink_in_process(table: Path, checkpoint: Path, batches: list) -> float:
    """The Delta sink's tasks and committer as Spark's adapter calls them, without Spark."""
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    from sparklink.delta.sink import DeltaSink
    from sparklink.sink import WriterContext
    from sparklink.spark.sink_adapter import SinkCommitMessage, SinkStreamWriter

    schema = StructType([StructField("id", LongType()), StructField("v", StringType()),
                         StructField("op", StringType()), StructField("seq", LongType())])
    options = {"path": str(table), "checkpointLocation": str(checkpoint), "writeMode": "upsert", "keyColumns": "id",
               "opColumn": "op", "sequenceColumn": "seq"}
    start = time.perf_counter()
    for batch_id, changes in enumerate(batches):
        sink = DeltaSink(options, schema)
        half = -(-changes.num_rows // 2)
        messages = []
        for partition in range(2):
            writer = sink.create_writer(WriterContext(partition_id=partition, attempt_number=0,
                                                      task_attempt_id=partition, job_id=f"bench-{batch_id}",
                                                      batch_id=batch_id, query_id="bench"))
            for piece in changes.slice(partition * half, half).to_batches():
                writer.write_batch(piece)
            writer.flush()
            messages.append(SinkCommitMessage(partition_id=partition, attempt_number=0, query_id="bench",
                                              committables=writer.prepare_commit()))
            writer.close()
        SinkStreamWriter(sink, query_id="bench").commit(messages, batch_id)
    return time.perf_counter() - start


def time_reduce(batch) -> float:
    from sparklink.sink.changelog import Changelog

    changelog = Changelog(key_columns=("id",), op_column="op", sequence_column="seq")
    start = time.perf_counter()
    changelog.reduce(batch)
    return time.perf_counter() - start


def run_upsert(spark, work: Path, keys: int, changed: float, batches: int, peer: bool) -> bool:
    """The upsert half; False when a table differs from sparklink's (printed loudly)."""
    from deltalake import DeltaTable

    base, changes_dir, tables = write_upsert_input(work, keys, changed, batches)
    ours, floor, in_process = work / "upsert-sparklink", work / "upsert-deltars", work / "upsert-sink"
    peer_table, warm_table, peer_warm = work / "upsert-peer", work / "upsert-warm", work / "upsert-peer-warm"
    for copy in (ours, floor, in_process, peer_table, warm_table, peer_warm):
        shutil.copytree(base, copy)
    warm_dir = work / "upsert-in-warm"  # the first changelog file alone: the untimed warm-up queries' input
    warm_dir.mkdir()
    shutil.copy2(changes_dir / "changes-000.parquet", warm_dir)
    changes = sum(t.num_rows for t in tables)
    time_upsert_stream(spark, warm_dir, warm_table, work / "ck-upsert-warm")  # untimed: class loading, workers
    seconds = time_upsert_stream(spark, changes_dir, ours, work / "ck-upsert")
    append_seconds = time_upsert_stream(spark, changes_dir, work / "upsert-append", work / "ck-append", upsert=False)
    floor_seconds, parts = time_merge_floor(floor, tables)
    sink_seconds = time_sink_in_process(in_process, work / "ck-upsert-sink", tables)
    reduce_seconds = time_reduce(tables[0])
    peer_run = peer_upsert(work, changes_dir, warm_dir, peer_table, peer_warm) if peer else None
    ours_rows = DeltaTable(str(ours)).to_pyarrow_table().sort_by("id")
    floor_rows = DeltaTable(str(floor)).to_pyarrow_table().sort_by("id")
    assert ours_rows.equals(floor_rows), "sparklink's upsert table differs from delta-rs's merge"
    assert DeltaTable(str(in_process)).to_pyarrow_table().sort_by("id").equals(floor_rows)
    problems = []
    if peer_run is not None:
        peer_rows = DeltaTable(str(peer_table)).to_pyarrow_table().select(ours_rows.column_names).sort_by("id")
        problems = same_rows(ours_rows, peer_rows)
        if peer_run["rows"] != changes or peer_run["batches"] != batches:
            problems.append(f"the peer's query read {peer_run['rows']} changes in {peer_run['batches']} micro-batches, "
                            f"not {changes} in {batches}")
        txn = DeltaTable(str(peer_table)).transaction_version(PEER_APP_ID)
        if txn != batches - 1:
            problems.append(f"the peer's table holds txn version {txn} of {PEER_APP_ID}, not {batches - 1} (the "
                            "txnAppId / txnVersion settings did not reach its MERGE commits)")
    load = os.getloadavg()
    print(f"upsert: keys={keys} changed per batch={changed:.0%} batches={batches} changes={changes} "
          f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")

    def quality(table: Path) -> str:
        count, _, size = delta_quality(table)
        return f"  [table: {count} files, {size / 1e6:.2f} MB]"

    print(f"upsert      {seconds:7.2f} s  {changes / seconds:12,.0f} changes/s  (sparklink.delta writeMode=upsert, "
          f"Spark stream, one MERGE per micro-batch){quality(ours)}")
    if peer_run is not None:
        peer_seconds = peer_run["seconds"]
        print(f"delta-spark {peer_seconds:7.2f} s  {changes / peer_seconds:12,.0f} changes/s  (Delta 4.4 on "
              "PySpark 4.2: foreachBatch -> dedup -> DeltaTable.merge, txnAppId/txnVersion session settings)"
              f"{quality(peer_table)}")
    print(f"append      {append_seconds:7.2f} s  {changes / append_seconds:12,.0f} changes/s  (the same files "
          "appended by the same stream: Spark's share)")
    print(f"merge       {floor_seconds:7.2f} s  {changes / floor_seconds:12,.0f} changes/s  (delta-rs merge in one "
          f"process: scan {parts['scan']:.2f} s, rewrite {parts['rewrite']:.2f} s, planning + commit "
          f"{parts['rest']:.2f} s){quality(floor)}")
    print(f"sink        {sink_seconds:7.2f} s  {changes / sink_seconds:12,.0f} changes/s  (the sink's tasks and "
          "committer in this process, without Spark)")
    print(f"reduce      {reduce_seconds:7.2f} s  {tables[0].num_rows / reduce_seconds:12,.0f} changes/s  "
          "(Changelog.reduce of one batch)")
    print(f"upsert: sparklink / delta-rs merge (changes/s) = {floor_seconds / seconds:.2f}x")
    if peer_run is not None:
        print(f"upsert: sparklink / Spark-Delta foreachBatch MERGE (changes/s) = {peer_run['seconds'] / seconds:.2f}x")
    if problems:
        print("!" * 100)
        print("MISMATCH: the peer's (Delta's Spark connector) final table differs from sparklink's:")
        for problem in problems:
            print(f"  {problem}")
        print("!" * 100)
    elif peer_run is not None:
        print(f"upsert: the peer's final table equals sparklink's ({ours_rows.num_rows} rows, same ids and values)")
    return not problems


def report(title: str, rows: int, repeat: int, best: dict[str, float], reference: str,
           quality: dict[str, tuple[int, int, int]] | None = None) -> None:
    load = os.getloadavg()
    print(f"{title}: rows={rows} repeat={repeat} load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    for name, seconds in best.items():
        files = ""
        if quality and name in quality:
            count, row_groups, size = quality[name]
            files = f"  {count} files, {row_groups} row groups, {size / 1e6:.2f} MB"
        print(f"{name:11s} {seconds:7.2f} s  {rows / seconds:12,.0f} rows/s  "
              f"(time = {seconds / best[reference]:.2f} x {reference}'s){files}")
    if "delta-spark" in best:
        print(f"{title}: sparklink.delta / delta-spark (rows/s) = {best['delta-spark'] / best[reference]:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--half", choices=("sink", "source", "both", "upsert"), default="both")
    parser.add_argument("--keys", type=int, default=1_000_000, help="keys of the upsert half's table")
    parser.add_argument("--changed", type=float, default=0.1, help="share of the keys each upsert batch changes")
    parser.add_argument("--batches", type=int, default=3, help="micro-batches of the upsert half")
    parser.add_argument("--files", type=int, default=8, help="versions (data files) of the source's table")
    parser.add_argument("--shape", choices=bench_data.SHAPES, default="simple")
    parser.add_argument("--no-peer", action="store_true", help="skip Delta's Spark connector")
    args = parser.parse_args()

    from deltalake import DeltaTable

    import sparklink
    from sparklink.testing.spark_session import spark_session

    work = Path(tempfile.mkdtemp(prefix="bench-delta-"))
    try:
        source = work / "in"
        write_input(source, 10_000 if args.half == "upsert" else args.rows, args.shape)
        spark = spark_session("local[2]", "bench-delta")
        sparklink.register(spark)
        if args.half == "upsert":
            same = run_upsert(spark, work, args.keys, args.changed, args.batches, peer=not args.no_peer)
            spark.stop()
            if not same:
                sys.exit(1)
            return
        # untimed warm-up: the session's first streaming query pays for class loading and workers
        time_stream(spark, source, "sparklink.delta", work / "warm", work / "ck-warm", {})
        table = work / "source-table"
        if args.half in ("source", "both"):
            write_delta_input(source, table, args.files)
        peer = Best() if args.no_peer else peer_times(source, work, args.rows, args.repeat, args.half, table)
        if args.half in ("sink", "both"):
            sinks = Best()
            quality: dict[str, tuple[int, int, int]] = {}
            for run in range(args.repeat):
                cases = {
                    "delta": lambda o, c: time_stream(spark, source, "sparklink.delta", o, c, {}),
                    "files": lambda o, c: time_stream(spark, source, "sparklink.files", o, c,
                                                      {"format": "parquet", "bucketAssigner": "basepath"}),
                    "deltalake": lambda o, c: time_deltalake(source, o),
                }
                for name, case in cases.items():
                    out, checkpoint = work / f"{name}-{run}", work / f"ck-{name}-{run}"
                    result = case(out, checkpoint)
                    if name in ("delta", "deltalake"):
                        assert DeltaTable(str(out)).to_pyarrow_table().num_rows == args.rows
                        quality[name] = delta_quality(out)
                    sinks.record(name, result)
            if "sink" in peer.seconds:
                sinks.add("delta-spark", peer.seconds["sink"], peer.batches["sink"])
                quality["delta-spark"] = delta_quality(work / "delta-spark-1")
            report("sink", args.rows, args.repeat, sinks.seconds, "delta", quality)
            print(sinks.micro_batch_line("sink:", ("delta", "files", "delta-spark"), "delta-spark", "delta-spark",
                                         (("delta", "sparklink.delta"),)))
        if args.half in ("source", "both"):
            time_source(spark, table, work / "ck-source-warm")  # untimed: the source's first query
            from deltalake import DeltaTable

            floor = streaming_floor_frame(spark, DeltaTable(str(table)).to_pyarrow_dataset().to_table(),
                                          work / "floor.arrow", SCHEMA)
            time_streaming_floor(floor, work / "ck-floor-warm", args.rows)  # untimed warm-up
            library = library_source_frame(spark, "deltalake", {"path": str(table)}, SCHEMA)
            time_streaming_floor(library, work / "ck-library-warm", args.rows)  # untimed warm-up
            timed = Best()
            for run in range(args.repeat):
                for name, case in {"source": lambda run=run: time_source(spark, table, work / f"ck-source-{run}"),
                                   "dataset": lambda: time_dataset(table, args.rows),
                                   "floor": lambda run=run: time_streaming_floor(floor, work / f"ck-floor-{run}",
                                                                                 args.rows),
                                   "deltalake": lambda run=run: time_streaming_floor(
                                       library, work / f"ck-library-{run}", args.rows)}.items():
                    result = case()
                    assert not isinstance(result, QueryTimes) or result.rows == args.rows, (name, result)
                    timed.record(name, result)
            if "source" in peer.seconds:
                timed.add("delta-spark", peer.seconds["source"], peer.batches["source"])
            best = timed.seconds
            report("source", args.rows, args.repeat, best, "source", {"source": delta_quality(table)})
            print(f"source: the source over the floor {best['source'] - best['floor']:.2f} s; sparklink.delta / the "
                  f"deltalake source {best['deltalake'] / best['source']:.2f}x"
                  + (f"; the deltalake source / delta-spark {best['delta-spark'] / best['deltalake']:.2f}x; floor / "
                     f"delta-spark {best['delta-spark'] / best['floor']:.2f}x" if "delta-spark" in best else ""))
            print(timed.micro_batch_line("source:", ("source", "deltalake", "floor", "delta-spark"), "delta-spark",
                                         "delta-spark", (("source", "sparklink.delta"), ("deltalake", "deltalake source"),
                                                         ("floor", "floor"))))
        spark.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
