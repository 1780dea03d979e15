"""Changes/s of the PostgreSQL sink's ``writeMode=upsert`` (semantics upsert, two-phase and
write-ahead) against PostgreSQL's own ``MERGE`` from one process, the floor.

Run: .venv/bin/python bench/bench_changelog.py [--keys 1000000] [--fraction 0.1] [--batches 3] [--tasks 2]

Starts a private PostgreSQL server (as the test fixture does). For each writer, a table of
``--keys`` rows (id bigint primary key, seq bigint, v text) is loaded by COPY, then ``--batches``
batches of changes are applied, each touching ``--fraction`` of the keys at random (90 %
updates, 10 % deletes, a few new keys, sequence values increasing), and changes/s is the batches'
changes over their wall time (best batch and mean).

* sink: the sink's writers and the SDK's commit, driven in this process as Spark's adapter drives
  them (``--tasks`` writers, rows dealt by key), without Spark: what the sink itself costs;
  Spark's fixed per-batch cost (planning, task start: about 0.2 s on a quiet machine) comes on top.
* floor: one psycopg connection: COPY of the batch into a temporary table, then one ``MERGE``
  (``WHEN MATCHED AND del THEN DELETE WHEN MATCHED AND s.seq >= t.seq THEN UPDATE WHEN NOT MATCHED
  AND NOT del THEN INSERT``): the least work that applies the same changes with the same ordering
  rule.

Numbers from this machine are noisy when other jobs run; the report says so.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid

import numpy as np
import pyarrow as pa


def changes_batch(rng: np.random.Generator, keys: int, count: int, seq: int) -> pa.RecordBatch:
    """``count`` changes of distinct keys: 10 % deletes, 2 % new keys, the rest updates."""
    ids = rng.choice(keys, size=count, replace=False).astype(np.int64)
    new = rng.random(count) < 0.02
    ids[new] = keys + rng.integers(0, keys, size=int(new.sum()))
    ids = np.unique(ids)
    deletes = rng.random(len(ids)) < 0.1
    ops = np.where(deletes, "d", "u")
    return pa.record_batch({"id": pa.array(ids), "op": pa.array(ops.tolist(), pa.string()),
                            "seq": pa.array(np.full(len(ids), seq, np.int64)),
                            "v": pa.array([f"s{seq}"] * len(ids), pa.string())})


def load_table(conn, table: str, keys: int) -> None:
    conn.execute(f'CREATE TABLE "{table}" (id bigint PRIMARY KEY, seq bigint, v text)')
    with conn.cursor().copy(f'COPY "{table}" (id, seq, v) FROM STDIN') as copy:
        block = 100_000
        for start in range(0, keys, block):
            copy.write("".join(f"{i}\t0\tinitial\n" for i in range(start, min(keys, start + block))))
    conn.commit()
    conn.execute(f'ANALYZE "{table}"')
    conn.commit()


def sink_apply(dsn: str, table: str, semantic: str, checkpoint: str, tasks: int):
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    from sparklink.postgres.connector import PostgresSinkConnector
    from sparklink.sink import WriterContext
    from sparklink.sink.protocol import commit_batch

    schema = StructType([StructField("id", LongType()), StructField("op", StringType()),
                         StructField("seq", LongType()), StructField("v", StringType())])
    options = {"dsn": dsn, "table": table, "semantic": semantic, "writeMode": "upsert", "keyColumns": "id",
               "opColumn": "op", "sequenceColumn": "seq", "checkpointLocation": checkpoint, "createTable": "false"}

    def apply(batch: pa.RecordBatch, number: int) -> None:
        import pyarrow.compute as pc

        sink = PostgresSinkConnector(options, schema)
        job = f"bench-{number}"
        committables = []
        for task in range(tasks):
            part = batch.filter(pc.equal(pc.bit_wise_and(batch.column("id"), tasks - 1), task))  # by key
            writer = sink.create_writer(WriterContext(partition_id=task, attempt_number=0, task_attempt_id=task,
                                                      job_id=job, batch_id=None, query_id=None))
            if part.num_rows:
                writer.write_batch(part)
            writer.flush()
            committables += writer.prepare_commit()
            writer.close()
        commit_batch(sink, None, job, committables)
    return apply


def merge_apply(conn, table: str):
    def apply(batch: pa.RecordBatch, _number: int) -> None:
        conn.execute("CREATE TEMPORARY TABLE s (id bigint, seq bigint, v text, del boolean) ON COMMIT DROP")
        with conn.cursor().copy("COPY s (id, seq, v, del) FROM STDIN") as copy:
            for i, op, seq, v in zip(*(batch.column(n).to_pylist() for n in ("id", "op", "seq", "v")), strict=True):
                copy.write_row((i, seq, v, op == "d"))
        conn.execute(f'MERGE INTO "{table}" AS t USING s ON t.id = s.id '
                     "WHEN MATCHED AND s.del AND t.seq <= s.seq THEN DELETE "
                     "WHEN MATCHED AND NOT s.del AND s.seq >= t.seq THEN UPDATE SET seq = s.seq, v = s.v "
                     "WHEN NOT MATCHED AND NOT s.del THEN INSERT (id, seq, v) VALUES (s.id, s.seq, s.v)")
        conn.commit()
    return apply


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--fraction", type=float, default=0.1)
    parser.add_argument("--batches", type=int, default=3)
    parser.add_argument("--tasks", type=int, default=2, help="writers per batch (a power of two)")
    parser.add_argument("--writers", default="merge,upsert,two-phase,write-ahead")
    args = parser.parse_args()
    if args.tasks < 1 or args.tasks & (args.tasks - 1):
        parser.error("--tasks must be a power of two")

    from sparklink.testing import start_postgres

    server = start_postgres()
    try:
        print(f"{args.keys:,} keys, {args.fraction:.0%} changed per batch, {args.batches} batches, "
              f"{args.tasks} tasks per batch (sink)")
        for name in args.writers.split(","):
            table = f"bench_{name.replace('-', '_')}_{uuid.uuid4().hex[:6]}"
            with server.connect() as conn:
                load_table(conn, table, args.keys)
                with tempfile.TemporaryDirectory() as checkpoint:
                    apply = merge_apply(conn, table) if name == "merge" else \
                        sink_apply(server.dsn, table, name, checkpoint, args.tasks)
                    rng = np.random.default_rng(7)
                    rates = []
                    for number in range(args.batches):
                        batch = changes_batch(rng, args.keys, int(args.keys * args.fraction), seq=number + 1)
                        started = time.perf_counter()
                        apply(batch, number)
                        rates.append(batch.num_rows / (time.perf_counter() - started))
                    count = conn.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0]
            label = "floor: MERGE, one process" if name == "merge" else f"sink: semantic={name}"
            print(f"{label:32s} best {max(rates):>10,.0f} changes/s  mean {statistics.mean(rates):>10,.0f}  "
                  f"({count:,} rows after)")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
