"""Where the time of sparklink's Kafka exactly-once sink goes, outside Spark (a profile, not a bench).

Run: PYSPARK_PYTHON=.venv/bin/python .venv/bin/python bench/profile_kafka_sink.py [--rows N] [--tasks N]
     [--partitions N] [--profile] [--upsert]

On Apache Kafka's own broker (one KRaft node on loopback, as the tests start it), the sink's
executor and driver code is driven directly, as Spark drives it for one ``df.write`` of
``--tasks`` tasks: each task's :class:`~sparklink.kafka.sink.KafkaWriter` gets the rows as Arrow
record batches of 10,000 rows (Spark's ``spark.sql.execution.arrow.maxRecordsPerBatch``),
records shaped like ``bench/bench_kafka.py``'s ``simple`` shape (key: the id as text; value: a
JSON row of about 90 bytes). Per phase, the wall time summed over the tasks (run one after the
other): the producer's session (``InitProducerId``), the hand-over of the rows to librdkafka
(``produce`` calls, Python), the flush (the broker's acknowledgements), the transaction's end
in the writer (the batch marker, streaming only: not here), and the driver's commit
(``EndTxn`` per task). The same rows are then written by the at-least-once writer.
``--profile``: cProfile of one exactly-once task's send and flush, the top functions by own time.
``--upsert``: the rows as a changelog (``id``, ``value``, ``op``: every tenth row a delete) written
with ``writeMode=upsert``, ``keyColumns=id``, ``opColumn=op`` (``bench_kafka.py``'s ``changes``
case; no ``sequenceColumn``): each batch is reduced to its last change per key (phase ``reduce``)
and sent as it comes (``send``), then the task flushes (``flush``).

Then the driver's commit path alone, ``--commits`` prepared transactions (one record each, as
many transactional ids) ended one by one as a streaming query's micro-batches end them: on a
connection each (``TransactionCoordinator`` opened and closed per call, what the committer did
before) and through ``end_transaction`` (kept connections, remembered coordinators).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

BATCH_ROWS = 10_000


def record_batches(rows: int, first: int, upsert: bool):
    import pyarrow as pa

    for start in range(first, first + rows, BATCH_ROWS):
        ids = range(start, min(start + BATCH_ROWS, first + rows))
        values = pa.array([json.dumps({"id": i, "name": f"user-{i}", "score": i * 0.5, "active": i % 2 == 0,
                                       "city": "city-" + str(i % 97)}).encode() for i in ids], pa.binary())
        if upsert:
            yield pa.RecordBatch.from_arrays([pa.array(ids, pa.int64()), values,
                                              pa.array(["d" if i % 10 == 0 else "u" for i in ids])],
                                             names=["id", "value", "op"])
        else:
            yield pa.RecordBatch.from_arrays([pa.array([str(i).encode() for i in ids], pa.binary()), values],
                                             names=["key", "value"])


class _PhaseClock:
    """Adds the wall time of the producer's send and flush and of the changelog's reduction to
    the run's phases (wrapping those methods for the run: a profile, never the sink's code)."""

    def __init__(self, phases: dict[str, float]):
        from sparklink.kafka.producer import RecordProducer
        from sparklink.sink.changelog import Changelog

        self.phases = phases
        self.wrapped = [(RecordProducer, "send", "send"), (RecordProducer, "flush", "flush"),
                        (Changelog, "reduce", "reduce")]
        self.originals = [getattr(owner, name) for owner, name, _ in self.wrapped]

    def __enter__(self):
        for (owner, name, phase), original in zip(self.wrapped, self.originals, strict=True):
            def timed(*args, original=original, phase=phase, **kwargs):
                started = time.perf_counter()
                try:
                    return original(*args, **kwargs)
                finally:
                    self.phases[phase] += time.perf_counter() - started
            setattr(owner, name, timed)
        return self

    def total(self) -> float:
        """The seconds of the wrapped methods so far (to take out of a span that called them)."""
        return sum(self.phases[phase] for _, _, phase in self.wrapped)

    def __exit__(self, *exc) -> None:
        for (owner, name, _), original in zip(self.wrapped, self.originals, strict=True):
            setattr(owner, name, original)


def run(bootstrap: str, topic: str, rows: int, tasks: int, semantic: str, profile: bool,
        upsert: bool) -> dict[str, float]:
    from pyspark.sql.types import BinaryType, LongType, StringType, StructField, StructType

    from sparklink.kafka.sink import KafkaSink
    from sparklink.sink import CommitRequest, WriterContext

    options = {"kafka.bootstrap.servers": bootstrap, "topic": topic, "semantic": semantic}
    if upsert:
        schema = StructType([StructField("id", LongType()), StructField("value", BinaryType()),
                             StructField("op", StringType())])
        options.update(writeMode="upsert", keyColumns="id", opColumn="op")
    else:
        schema = StructType([StructField("key", BinaryType()), StructField("value", BinaryType())])
    sink = KafkaSink(options, schema)
    job = uuid.uuid4().hex
    phases = dict.fromkeys(("session", "hand-over", "reduce", "send", "flush", "prepare (rest)", "commit"), 0.0)
    committables = []
    per_task = rows // tasks
    batches = [list(record_batches(per_task, task * per_task, upsert)) for task in range(tasks)]
    with _PhaseClock(phases) as clock:
        for task in range(tasks):
            writer = sink.create_writer(WriterContext(partition_id=task, attempt_number=0, task_attempt_id=task,
                                                      job_id=job, batch_id=None, query_id=None))
            started = time.perf_counter()
            writer._open()
            phases["session"] += time.perf_counter() - started
            profiler = cProfile.Profile() if profile and task == 0 else None
            if profiler:
                profiler.enable()
            started, clocked = time.perf_counter(), clock.total()
            for batch in batches[task]:
                writer.write_batch(batch)
            phases["hand-over"] += time.perf_counter() - started - (clock.total() - clocked)
            started, clocked = time.perf_counter(), clock.total()
            committables += writer.prepare_commit()
            phases["prepare (rest)"] += time.perf_counter() - started - (clock.total() - clocked)
            if profiler:
                profiler.disable()
                out = io.StringIO()
                pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(12)
                print(out.getvalue())
            writer.close()
        started = time.perf_counter()
        sink.create_committer().commit([CommitRequest(committable=c, batch_id=None) for c in committables])
        phases["commit"] += time.perf_counter() - started
    return phases


def commit_path(kafka_client: dict[str, str], topic: str, commits: int) -> dict[str, float]:
    from pyspark.sql.types import StringType, StructField, StructType

    from sparklink.kafka.producer import RecordProducer
    from sparklink.kafka.sink_config import KafkaSinkConfig
    from sparklink.kafka.transaction_coordinator import TransactionCoordinator, end_transaction

    config = KafkaSinkConfig.from_options({"kafka.bootstrap.servers": kafka_client["bootstrap.servers"],
                                           "topic": topic}, StructType([StructField("value", StringType())]))
    seconds = {}
    for way in ("a connection per commit", "kept connection"):
        prepared = []
        for n in range(commits):
            producer = RecordProducer(config, f"{topic}-{way[0]}-{n}")
            session = producer.init_transactions()
            producer.begin()
            producer.producer.produce(topic, b"x")
            producer.flush()
            prepared.append((producer.transactional_id, *session))
        started = time.perf_counter()
        for transactional_id, producer_id, epoch in prepared:
            if way == "kept connection":
                result = end_transaction(kafka_client, transactional_id, producer_id, epoch, commit=True)
            else:
                with TransactionCoordinator(kafka_client) as coordinator:
                    result = coordinator.end(transactional_id, producer_id, epoch, commit=True)
            assert result.ok, result.error_name
        seconds[way] = time.perf_counter() - started
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--tasks", type=int, default=2)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--commits", type=int, default=20)
    parser.add_argument("--upsert", action="store_true", help="writeMode=upsert (bench_kafka's changes case)")
    args = parser.parse_args()

    import os

    from sparklink.testing.kafka import create_topic, start_kafka

    broker = start_kafka()
    try:
        print(f"load average {os.getloadavg()[0]:.1f}; Apache Kafka {broker.version}; {args.rows:,} rows in "
              f"{args.tasks} tasks, {args.partitions} partitions", flush=True)
        for round_ in ("warm-up", "timed"):
            for semantic in ("exactly-once", "at-least-once"):
                topic = f"profile-{semantic}-{uuid.uuid4().hex[:8]}"
                create_topic(broker.bootstrap_servers, topic, args.partitions)
                rows = args.rows if round_ == "timed" else 10_000
                phases = run(broker.bootstrap_servers, topic, rows, args.tasks, semantic,
                             args.profile and round_ == "timed" and semantic == "exactly-once", args.upsert)
                total = sum(phases.values())
                if round_ == "timed":
                    print(f"{semantic}: {rows / total:,.0f} rows/s, {total:.2f} s: "
                          + ", ".join(f"{name} {seconds:.2f} s" for name, seconds in phases.items()), flush=True)
        topic = f"profile-commits-{uuid.uuid4().hex[:8]}"
        create_topic(broker.bootstrap_servers, topic, args.partitions)
        for way, seconds in commit_path(broker.client, topic, args.commits).items():
            print(f"commit path, {args.commits} transactions ended one by one, {way}: {seconds:.2f} s "
                  f"({seconds / args.commits * 1000:.1f} ms each)", flush=True)
    finally:
        broker.stop()


if __name__ == "__main__":
    main()
