"""Driver jobs of the Cassandra kill/restart tests (run by sparklink.testing in a driver process
of their own, and again in the test's session to finish)."""

from __future__ import annotations


def stream_keys(spark, *, connection: dict, keyspace: str, table: str, checkpoint: str, semantic: str,
                rows: int, per_batch: int) -> None:
    """Stream ids 0..rows-1 (``per_batch`` per micro-batch, so micro-batch b holds ids
    b*per_batch .. (b+1)*per_batch-1) into ``sparklink.cassandra``.

    upsert: ``key = id % per_batch`` (each key once per micro-batch), ``value = id``: the last
    value of key k is the last micro-batch's id. write-ahead: ``id`` and ``nonce = uuid()``, a
    value computed anew each time Spark computes the batch (the table's key is ``(id, nonce)``).
    ``connection``: the options that reach the node (hosts, port, credentials)."""
    frame = (spark.readStream.format("sparklink.sequence").option("numSplits", 2).option("rowsPerSplit", rows // 2)
             .option("maxRowsPerTrigger", per_batch).load())
    if semantic == "upsert":
        frame = frame.selectExpr(f"id % {per_batch} AS key", "id AS value")
    else:
        frame = frame.selectExpr("id", "uuid() AS nonce")
    (frame.writeStream.format("sparklink.cassandra").options(**connection).option("keyspace", keyspace).option("table", table).option("semantic", semantic)
     .option("checkpointLocation", checkpoint).trigger(availableNow=True).start().awaitTermination())
