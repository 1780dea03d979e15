"""Driver jobs of the Cassandra kill/restart tests (run by sparklink.testing in a driver process
of their own, and again in the test's session to finish)."""

from __future__ import annotations

import time
from pathlib import Path

from sparklink.examples.sequence_source import SequenceEnumerator
from sparklink.source import ReadLimit


def stream_keys_with_both_semantics(spark, *, connection: dict, keyspace: str, tables: dict[str, str],
                                    checkpoint: str, rows: int, per_batch: int, hold_batch: int | None = None,
                                    gate: str | None = None) -> None:
    """Two queries of :func:`start_keys` in one driver, one per semantic (``tables``: semantic ->
    table; checkpoints ``<checkpoint>-<semantic>``), both to their end: the family's one SIGKILL
    sequence kills them together. With ``hold_batch`` and ``gate``, each query's tasks hold the
    rows of micro-batch ``hold_batch`` and later until the file ``gate`` exists: both queries
    stop mid-stream, whatever their pace, and the test kills them there."""
    queries = [start_keys(spark, connection=connection, keyspace=keyspace, table=table,
                          checkpoint=f"{checkpoint}-{semantic}", semantic=semantic, rows=rows, per_batch=per_batch,
                          hold_batch=hold_batch, gate=gate)
               for semantic, table in tables.items()]
    for query in queries:
        query.awaitTermination()


def start_keys(spark, *, connection: dict, keyspace: str, table: str, checkpoint: str, semantic: str,
               rows: int, per_batch: int, hold_batch: int | None = None, gate: str | None = None):
    """Start streaming ids 0..rows-1 (``per_batch`` per micro-batch) into ``sparklink.cassandra``
    with an availableNow trigger; returns the query.

    upsert: a changelog (:func:`changelog_sql`: inserts, updates, deletes, keys repeated within
    a micro-batch, sequence values out of order) with writeMode=upsert and sequenceColumn. write-ahead: ``id`` and ``nonce = uuid()``, a
    value computed anew each time Spark computes the batch (the table's key is ``(id, nonce)``).
    ``connection``: the options that reach the node (hosts, port, credentials)."""
    # upsert: one split, so that micro-batch b is exactly ids b*per_batch .. (the test's replay
    # relies on it; several splits are admitted round-robin in uneven slices)
    splits = 1 if semantic == "upsert" else 2
    frame = (spark.readStream.format("sparklink.sequence").option("numSplits", splits)
             .option("rowsPerSplit", rows // splits).option("maxRowsPerTrigger", per_batch).load())
    if hold_batch is not None and gate is not None:
        frame = frame.mapInArrow(held_from(admitted_before(hold_batch, splits, rows // splits, per_batch), gate),
                                 frame.schema)
    if semantic == "upsert":  # a changelog, applied with writeMode=upsert; a key's changes in one task
        frame = frame.selectExpr(*changelog_sql(rows)).repartition(2, "k")
    else:
        frame = frame.selectExpr("id", "uuid() AS nonce")
    writer = (frame.writeStream.format("sparklink.cassandra").options(**connection).option("keyspace", keyspace)
              .option("table", table).option("semantic", semantic).option("checkpointLocation", checkpoint))
    if semantic == "upsert":
        writer = (writer.option("writeMode", "upsert").option("keyColumns", "k").option("opColumn", "op")
                  .option("sequenceColumn", "seq"))
    return writer.trigger(availableNow=True).start()


CHANGELOG_KEYS = 12


def changelog_sql(rows: int) -> tuple[str, ...]:
    """Change ``id`` of key ``k``: keys repeat within a micro-batch, sequence values are a
    permutation of the ids (out of order across micro-batches), a fifth are deletes; the same
    as :func:`changelog_change`."""
    return (f"(id * 7) % {CHANGELOG_KEYS} AS k", f"(id * 37) % {rows} AS seq",
            "CASE WHEN (id * 13 + 3) % 5 = 0 THEN 'd' ELSE 'u' END AS op", "concat('v', id) AS v")


def changelog_change(i: int, rows: int) -> tuple[int, int, str, str]:
    """Change ``i`` as (k, seq, op, v), as :func:`changelog_sql` computes it (rows must be prime to 37)."""
    return (i * 7) % CHANGELOG_KEYS, (i * 37) % rows, "d" if (i * 13 + 3) % 5 == 0 else "u", f"v{i}"


def admitted_before(batch_id: int, splits: int, rows_per_split: int, per_batch: int) -> list[int]:
    """How many rows of each split ``sparklink.sequence`` admits in micro-batches 0 .. batch_id - 1
    (its own enumerator asked: several splits are admitted in uneven slices)."""
    enumerator = SequenceEnumerator(splits, rows_per_split, None)
    offset = enumerator.initial_offset()
    for _ in range(batch_id):
        offset = enumerator.latest_offset(offset, ReadLimit(max_rows=per_batch))
    return list(offset["positions"])


def held_from(admitted: list[int], gate: str):
    """A ``mapInArrow`` function (runs on executors): passes record batches on, except that a
    batch holding a row past ``admitted`` (rows per split: id ``i`` is row ``i // splits`` of split
    ``i % splits``) waits until the file ``gate`` exists."""
    splits = len(admitted)

    def hold(batches):
        for batch in batches:
            if any(i // splits >= admitted[i % splits] for i in batch.column("id").to_pylist()):
                while not Path(gate).exists():
                    time.sleep(0.05)
            yield batch
    return hold
