"""Throughput of the sparklink.kafka source and sink against a plain confluent-kafka loop.

Run: PYSPARK_PYTHON=.venv/bin/python .venv/bin/python bench/bench_kafka.py [--rows N] [--sink-rows N] [--partitions N]

Starts a private Tansu broker (in memory, loopback, as the tests do) and measures, in one run:

* source: ``spark.read.format("sparklink.kafka")`` of a topic of ``--rows`` small records
  (about 20-byte values) into Spark's ``noop`` sink, against one confluent-kafka consumer
  reading the same topic with ``consume(num_messages=10000)`` (the client's own limit);
* sink: ``df.write.format("sparklink.kafka")`` of ``--sink-rows`` cached rows with
  semantic=exactly-once and semantic=at-least-once, against one idempotent confluent-kafka
  producer looping over the same rows.

After each timing, outside it, the output is checked: the rows the source reads and their
distinct values, and the records a read_committed consumer finds in each sink topic.

Each measurement runs once after a warm-up on 10,000 rows. The topic is loaded in batches with a
one-record batch at the end: Tansu reports a partition's end as the base offset of its last
record batch + 1 (docs/kafka.md).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))


def load_topic(bootstrap: str, topic: str, rows: int, partitions: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.num.messages": 10000,
                         "queue.buffering.max.messages": 500000})
    for i in range(rows - partitions):
        while True:
            try:
                producer.produce(topic, value=b"event-%014d" % i, partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.05)
    producer.flush()
    for p in range(partitions):  # one-record batches last: Tansu's reported end then covers everything
        producer.produce(topic, value=b"event-last-%d" % p, partition=p)
        producer.flush()


def consume_loop(bootstrap: str, topic: str, rows: int, partitions: int) -> float:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": "false",
                         "isolation.level": "read_committed"})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    started, seen = time.perf_counter(), 0
    while seen < rows:
        messages = consumer.consume(num_messages=10000, timeout=1.0)
        seen += len(messages)
    seconds = time.perf_counter() - started
    consumer.close()
    return rows / seconds


def produce_loop(bootstrap: str, topic: str, values: list[bytes]) -> float:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": "true"})
    started = time.perf_counter()
    for value in values:
        while True:
            try:
                producer.produce(topic, value=value, key=value)
                break
            except BufferError:
                producer.poll(0.05)
    producer.flush()
    return len(values) / (time.perf_counter() - started)


def read_back(bootstrap: str, topic: str, partitions: int, expected: int) -> tuple[int, int]:
    """The output check: (records, distinct values) a read_committed consumer finds in ``topic``,
    reading until ``expected`` records arrived or 10 s passed without one (a bench, not a test:
    Tansu's reported end of a partition written in multi-record batches is too low to stop on)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-check", "enable.auto.commit": "false",
                         "isolation.level": "read_committed"})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    records, values, quiet_since = 0, set(), time.monotonic()
    while records < expected and time.monotonic() - quiet_since < 10:
        messages = [m for m in consumer.consume(num_messages=10000, timeout=1.0) if m.error() is None]
        if messages:
            quiet_since = time.monotonic()
        records += len(messages)
        values.update(m.value() for m in messages)
    consumer.close()
    return records, len(values)


def timed(rows: int, action) -> float:
    started = time.perf_counter()
    action()
    return rows / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--sink-rows", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

    from sparklink.testing import spark_session
    from sparklink.testing.kafka import create_topic, start_tansu

    broker = start_tansu()
    bootstrap = broker.bootstrap_servers
    try:
        spark = spark_session(app_name="bench-kafka")
        print(f"load average {os.getloadavg()[0]:.1f}; {args.rows:,} source rows, {args.sink_rows:,} sink rows, "
              f"{args.partitions} partitions, local[2]", flush=True)
        create_topic(bootstrap, "warm", args.partitions)
        create_topic(bootstrap, "events", args.partitions)
        load_topic(bootstrap, "warm", 10_000, args.partitions)
        load_topic(bootstrap, "events", args.rows, args.partitions)

        def read(topic):
            (spark.read.format("sparklink.kafka").option("kafka.bootstrap.servers", bootstrap)
             .option("subscribe", topic).load().write.format("noop").mode("overwrite").save())

        read("warm")
        source_rate = timed(args.rows, lambda: read("events"))
        client_rate = consume_loop(bootstrap, "events", args.rows, args.partitions)
        print(f"source: sparklink.kafka -> noop {source_rate:,.0f} rows/s; confluent-kafka consume loop "
              f"{client_rate:,.0f} rows/s; ratio {source_rate / client_rate:.2f}x", flush=True)
        read = (spark.read.format("sparklink.kafka").option("kafka.bootstrap.servers", bootstrap)
                .option("subscribe", "events").load())
        print(f"source check: {read.count():,} rows read, {read.select('value').distinct().count():,} distinct "
              f"values, of {args.rows:,}", flush=True)

        frame = spark.range(args.sink_rows).selectExpr("cast(id as string) as key",
                                                       "concat('event-', lpad(cast(id as string), 14, '0')) as value")
        frame = frame.cache()
        frame.count()
        results = {}
        for semantic in ("exactly-once", "at-least-once"):
            for topic, data in ((f"warm-{semantic}", frame.limit(10_000)), (f"out-{semantic}", frame)):
                create_topic(bootstrap, topic, args.partitions)
                rows = 10_000 if topic.startswith("warm") else args.sink_rows
                results[semantic] = timed(rows, lambda: data.write.format("sparklink.kafka")
                                          .option("kafka.bootstrap.servers", bootstrap).option("topic", topic)
                                          .option("semantic", semantic).save())
        create_topic(bootstrap, "out-client", args.partitions)
        values = [b"event-%014d" % i for i in range(args.sink_rows)]
        client_sink = produce_loop(bootstrap, "out-client", values)
        for semantic, rate in results.items():
            print(f"sink {semantic}: {rate:,.0f} rows/s; confluent-kafka produce loop {client_sink:,.0f} rows/s; "
                  f"ratio {rate / client_sink:.2f}x", flush=True)
            records, distinct = read_back(bootstrap, f"out-{semantic}", args.partitions, args.sink_rows)
            print(f"sink {semantic} check: {records:,} records read back (read_committed), {distinct:,} distinct "
                  f"values, of {args.sink_rows:,}", flush=True)
        spark.stop()
    finally:
        broker.stop()


if __name__ == "__main__":
    main()
