"""Throughput of the sparklink.kafka source and sink against Spark's own Kafka connector.

Run: PYSPARK_PYTHON=.venv/bin/python .venv/bin/python bench/bench_kafka.py [--rows N] [--partitions N]
     [--shapes simple,users] [--cases sink,changes,source] [--repeat N]

One run, one machine, one broker: Apache Kafka's own (one KRaft node on loopback, started as the
tests start it: ``sparklink.testing.kafka.start_kafka``), one local[2] session with both
connectors: sparklink registered, and Spark's ``spark-sql-kafka-0-10`` from the artifact set
``tests/jvm/spark-kafka`` on ``spark.jars`` (never ``spark.jars.packages``; ``make jvm``
resolves it). For each data shape of ``bench/bench_data.py`` the rows become Kafka records
(key: the id as text; value: the row as JSON, ``to_json(struct(*))``), and:

* sink: ``--rows`` rows read by Spark's native Parquet source and written by
  ``df.write.format("sparklink.kafka")`` with ``semantic=exactly-once`` and with
  ``at-least-once``, against ``df.write.format("kafka")``: Spark's Kafka sink, which is
  **at-least-once** (no transactions: a retried task or a restarted query writes its records
  again). Each into a new topic of ``--partitions`` partitions.
* changes: the same rows as a changelog (``id``, ``value``, and ``op``: every tenth row ``d``, a
  delete) written by ``sparklink.kafka`` with ``writeMode=upsert``, ``keyColumns=id``,
  ``opColumn=op`` (the key from ``id``, a delete as a tombstone) in both semantics, against
  Spark's Kafka sink writing the same keys and values (a null value for a delete) itself; checked
  by the count of tombstones Spark's reader sees.
* source: the exactly-once sink's topic read by ``spark.read.format("sparklink.kafka")`` into
  Spark's ``noop`` sink, against ``spark.read.format("kafka")``; both with
  ``kafka.isolation.level=read_committed`` (sparklink's default; Spark's is read_uncommitted); and
  the floor: the same records (read once by Spark's Kafka source, untimed, into an Arrow IPC file)
  handed to Spark by a Python data source that yields them from memory (``bench_file_source``'s
  floor) into ``noop``: what any Python source pays to hand these rows to Spark, before it reads
  a byte from a broker. sparklink's source over the floor is its own share; the floor over Spark's
  source is the Python hand-over's.

Each figure is rows per second of one timed run (the best of ``--repeat`` runs) after a warm-up
on 10,000 rows of the same path; the ratio is sparklink's over Spark's. After each timing, outside it, the output is
checked with Spark's own Kafka reader (read_committed): records and distinct keys of each sink
topic, and the rows each source read.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_data import check_shapes, write_input  # noqa: E402
from bench_file_source import _MemoryFloor, write_floor_file  # noqa: E402

WARM_ROWS = 10_000


def timed(rows: int, action) -> float:
    started = time.perf_counter()
    action()
    return rows / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--shapes", default="simple,users")
    parser.add_argument("--cases", default="sink,changes,source",
                        help="comma-separated, of sink, changes, source (the source reads the sink's topic: "
                             "source needs sink)")
    parser.add_argument("--repeat", type=int, default=1, help="timed runs of each write and read; the best is kept")
    args = parser.parse_args()
    cases = {case.strip() for case in args.cases.split(",") if case.strip()}
    if not cases or cases - {"sink", "changes", "source"} or ("source" in cases and "sink" not in cases):
        parser.error(f"--cases {args.cases!r}: a comma-separated subset of sink, changes, source (source needs sink)")
    shapes = check_shapes(args.shapes)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

    from sparklink.testing import maven, spark_session
    from sparklink.testing.kafka import create_topic, start_kafka

    jars = maven.spark_jars("spark-kafka")
    broker = start_kafka()
    bootstrap = broker.bootstrap_servers
    work = Path(tempfile.mkdtemp(prefix="bench-kafka-"))
    try:
        spark = spark_session(app_name="bench-kafka", extra={"spark.jars": jars})
        print(f"load average {os.getloadavg()[0]:.1f}; Apache Kafka {broker.version}, Spark {spark.version} with "
              f"{Path(jars.split(',')[0]).parent.name}: {', '.join(Path(j).name for j in jars.split(','))}; "
              f"{args.rows:,} rows per shape, {args.partitions} partitions, local[2]", flush=True)

        def records(shape: str, rows: int):
            path = work / f"{shape}-{rows}"
            if not path.exists():
                write_input(spark, rows, path, shape)
            return spark.read.parquet(str(path)).selectExpr("cast(id as string) as key", "to_json(struct(*)) as value")

        def sparklink_sink(semantic: str):
            return lambda frame, topic: (frame.write.format("sparklink.kafka").option("kafka.bootstrap.servers", bootstrap)
                                         .option("topic", topic).option("semantic", semantic).save())

        def spark_sink(frame, topic):
            frame.write.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("topic", topic).save()

        def read_source(fmt: str, topic: str) -> None:
            (spark.read.format(fmt).option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
             .option("kafka.isolation.level", "read_committed").load().write.format("noop").mode("overwrite").save())

        def check(topic: str) -> tuple[int, int]:
            frame = (spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
                     .option("kafka.isolation.level", "read_committed").load())
            return frame.count(), frame.select("key").distinct().count()

        def time_write(write, frame_of, warm: str, topic: str) -> float:
            """Rows/s of ``write`` into the new topic ``topic`` (the best of ``--repeat`` runs, each
            after the first into a topic of its own, ``topic-<run>``), after a warm-up write into
            ``warm``."""
            create_topic(bootstrap, warm, args.partitions)
            write(frame_of(WARM_ROWS), warm)
            frame = frame_of(args.rows)
            best = 0.0
            for run in range(args.repeat):
                target = topic if run == 0 else f"{topic}-{run}"
                create_topic(bootstrap, target, args.partitions)
                best = max(best, timed(args.rows, lambda target=target: write(frame, target)))
            return best

        def changes(shape: str, rows: int):
            return records(shape, rows).selectExpr("cast(key as long) as id", "value",
                                                   "CASE WHEN cast(key as long) % 10 = 0 THEN 'd' ELSE 'u' END AS op")

        def changes_case(shape: str) -> None:
            """writeMode=upsert against Spark's sink writing the same keys, values and tombstones."""
            deletes = (args.rows + 9) // 10
            writers = {
                f"sparklink upsert {semantic}": lambda frame, topic, semantic=semantic: (
                    frame.write.format("sparklink.kafka").option("kafka.bootstrap.servers", bootstrap)
                    .option("topic", topic).option("semantic", semantic).option("writeMode", "upsert")
                    .option("keyColumns", "id").option("opColumn", "op").save())
                for semantic in ("exactly-once", "at-least-once")}
            writers["Spark kafka (at-least-once)"] = lambda frame, topic: spark_sink(
                frame.selectExpr("cast(id as string) as key", "CASE WHEN op = 'd' THEN NULL ELSE value END AS value"),
                topic)
            rates = {}
            for name, write in writers.items():
                slug = "-".join(name.lower().replace("(", "").replace(")", "").split()[:3])
                topic = f"changes-{shape}-{slug}"
                rates[name] = time_write(write, lambda rows: changes(shape, rows), f"warm-{topic}", topic)
                frame_read = (spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap)
                              .option("subscribe", topic).option("kafka.isolation.level", "read_committed").load())
                found, tombstones = frame_read.count(), frame_read.where("value IS NULL").count()
                print(f"changes {shape}: {name} {rates[name]:,.0f} changes/s (check: {found:,} records, "
                      f"{tombstones:,} tombstones read_committed, of {args.rows:,} and {deletes:,})", flush=True)
            for name in list(writers)[:2]:
                print(f"changes {shape}: {name} / Spark's at-least-once sink: "
                      f"{rates[name] / rates['Spark kafka (at-least-once)']:.2f}x", flush=True)

        sinks = {"sparklink exactly-once": sparklink_sink("exactly-once"),
                 "sparklink at-least-once": sparklink_sink("at-least-once"),
                 "Spark kafka (at-least-once)": spark_sink}
        for shape in shapes:
            if "sink" not in cases:
                if "changes" in cases:
                    changes_case(shape)
                continue
            rates = {}
            for name, write in sinks.items():
                slug = name.split()[0].lower() + "-" + name.split()[1].strip("()").lower()
                topic = f"out-{shape}-{slug}"
                rates[name] = time_write(write, lambda rows, shape=shape: records(shape, rows),
                                         f"warm-{shape}-{slug}", topic)
                found, distinct = check(topic)
                print(f"sink {shape}: {name} {rates[name]:,.0f} rows/s (check: {found:,} records read_committed, "
                      f"{distinct:,} distinct keys, of {args.rows:,})", flush=True)
            peer = rates["Spark kafka (at-least-once)"]
            for name in ("sparklink exactly-once", "sparklink at-least-once"):
                print(f"sink {shape}: {name} / Spark's at-least-once sink: {rates[name] / peer:.2f}x", flush=True)
            if "changes" in cases:  # after the plain sink, as in every run before --cases existed
                changes_case(shape)
            if "source" not in cases:
                continue

            source_topic, warm_topic = f"out-{shape}-sparklink-exactly-once", f"warm-{shape}-sparklink-exactly-once"
            source_rates = {}
            for name, fmt in (("sparklink", "sparklink.kafka"), ("Spark kafka", "kafka")):
                read_source(fmt, warm_topic)
                source_rates[name] = max(timed(args.rows, lambda fmt=fmt, topic=source_topic: read_source(fmt, topic))
                                         for _ in range(args.repeat))
                rows = (spark.read.format(fmt).option("kafka.bootstrap.servers", bootstrap)
                        .option("subscribe", source_topic).option("kafka.isolation.level", "read_committed")
                        .load().count())
                print(f"source {shape}: {name} -> noop {source_rates[name]:,.0f} rows/s (check: {rows:,} rows read, "
                      f"of {args.rows:,})", flush=True)
            print(f"source {shape}: sparklink / Spark's Kafka source: "
                  f"{source_rates['sparklink'] / source_rates['Spark kafka']:.2f}x", flush=True)
            floor = floor_frame(spark, bootstrap, source_topic, work / f"floor-{shape}.arrow")
            floor.write.format("noop").mode("overwrite").save()  # warm-up
            floor_rate = max(timed(args.rows, lambda floor=floor: floor.write.format("noop").mode("overwrite").save())
                             for _ in range(args.repeat))
            print(f"source {shape}: floor (the same records from memory through a Python data source) -> noop "
                  f"{floor_rate:,.0f} rows/s; sparklink / floor {source_rates['sparklink'] / floor_rate:.2f}x, "
                  f"floor / Spark's Kafka source {floor_rate / source_rates['Spark kafka']:.2f}x", flush=True)
        spark.stop()
    except BaseException:
        # the cause may be the broker's (a write of Spark's sink once expired its records after 120 s):
        # its log goes with its directory at stop, so print its tail first
        print(f"bench_kafka failed; the broker's log, last lines:\n{broker.log_tail()}", file=sys.stderr, flush=True)
        raise
    finally:
        broker.stop()


def floor_frame(spark, bootstrap: str, topic: str, path: Path):
    """The floor's frame: ``topic``'s records as Spark's Kafka source reads them (untimed), written
    to the Arrow IPC file ``path`` and read back by ``bench_file_source``'s memory source."""
    import pyarrow as pa

    from sparklink.kafka.records import record_schema, source_schema

    columns = source_schema(include_headers=False)  # Spark's Kafka source's columns, as sparklink's source has them
    names = columns.fieldNames()
    records = (spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
               .option("kafka.isolation.level", "read_committed").load())
    # cast to the Arrow types sparklink's source hands over (the timestamps' zone as a Python source gives it)
    table = pa.Table.from_batches(records.select(*names)._collect_as_arrow()).cast(record_schema(names))
    write_floor_file(table, path)
    _MemoryFloor.register(spark)
    ddl = ", ".join(f"{field.name} {field.dataType.simpleString()}" for field in columns.fields)
    return spark.read.format("bench.memory").option("schema", ddl).option("path", str(path)).load()


if __name__ == "__main__":
    main()
