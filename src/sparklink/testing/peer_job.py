"""One Spark session of a *peer* (Spark's own Delta, Iceberg or S3A connector) running a list of
steps, started by :mod:`sparklink.testing.peers` (test and benchmark side, never the runtime).

This file is run as a script, ``python peer_job.py <steps.json> <results.json>``, by the Python of
the peer's environment: PySpark 4.3's own venv (S3A) or a venv holding the older PySpark a
connector is built for (see :mod:`sparklink.testing.peers`). It therefore imports nothing but the
standard library and PySpark (and, in the ``merge`` step, Delta's Python API from the connector's
own jar): not sparklink, not pyarrow.

The steps file is ``{"conf": {spark setting: value}, "steps": [step, ...]}``; each step's result
(or its error, after which the remaining steps are skipped) is written to the results file as
one JSON list, in order. Steps (``"op"``):

  sql       ``{"query": "..."}``: ``spark.sql``; the rows collected as lists (keep them small)
  ids       ``{"format", "path" | "table", "options", "column"}``: a batch read; the values of
            ``column`` (default ``id``), sorted, duplicates kept
  count     the same as ``ids``, the row count only (``spark.read`` into ``count()``)
  stream    ``{"source": {...}, "sink": {...}, "checkpoint"}``: ``readStream`` -> ``writeStream``
            with ``trigger(availableNow=True)``, timed from ``start()`` to the end of
            ``awaitTermination()``; ``{"seconds", "rows", "batch_seconds"}`` (rows: the query's
            input rows; batch_seconds: its micro-batches' ``durationMs.triggerExecution`` summed,
            the query's start left out). A source/sink is ``{"format", "path" | "table",
            "options", "schema"}``
  noop      ``{"source": {...}}``: a batch read into Spark's ``noop`` sink, timed; ``{"seconds"}``
  write     ``{"input": {...}, "sink": {...}, "mode"}``: a batch read of ``input`` written with
            ``df.write`` (or ``writeTo(table).append()`` for a ``table``), timed; ``{"seconds"}``
  merge     ``{"source": {...}, "checkpoint", "path", "keys", "columns", "opColumn", "deletes",
            "sequence", "txnAppId"}``: a changelog upserted into the Delta table at ``path`` the
            way Spark's Delta users write one: ``readStream`` -> ``foreachBatch``, each micro-batch
            reduced to its last change per key (the greatest ``sequence``: ``row_number`` over a
            window by ``keys``), then ``DeltaTable.forPath(path).alias("t").merge(batch.alias("s"),
            keys equal)`` with ``whenMatchedDelete`` (``opColumn`` in ``deletes``, default ``["d"]``),
            ``whenMatchedUpdate`` (the others) and ``whenNotMatchedInsert`` (not a delete) of
            ``columns`` (the table's; plain names), both matched clauses only where ``s.<sequence> >=
            t.<sequence>`` or the stored one is null (sparklink's ``writeMode=upsert`` semantics).
            With ``txnAppId`` the MERGE is idempotent as Delta serves it for DML: the session
            settings ``spark.databricks.delta.write.txnAppId`` / ``txnVersion`` (= the batch id)
            set around each MERGE (a ``txn`` action in its commit). Delta's Python API is imported
            from the ``delta-spark`` jar on ``spark.jars`` (as ``--packages`` users get it). Timed
            and returned as ``stream``, plus ``"batches"`` (micro-batches that had input)
"""

from __future__ import annotations

import json
import sys
import time
import traceback


def batch_seconds(progress: list[dict]) -> float:
    """Seconds of the micro-batches of a query's ``recentProgress`` (``triggerExecution`` summed):
    the query's start left out. The benchmarks time sparklink's queries with it too."""
    return sum(record["durationMs"].get("triggerExecution", 0) for record in progress) / 1000


def _reader(spark, spec: dict, stream: bool):
    reader = spark.readStream if stream else spark.read
    if spec.get("format"):
        reader = reader.format(spec["format"])
    if spec.get("schema"):
        reader = reader.schema(spec["schema"])
    reader = reader.options(**spec.get("options", {}))
    if "table" in spec:
        return reader.table(spec["table"])
    return reader.load(spec["path"]) if spec.get("path") else reader.load()


def _run(spark, step: dict):
    op = step["op"]
    if op == "sql":
        return [list(row) for row in spark.sql(step["query"]).collect()]
    if op == "ids":
        column = step.get("column", "id")
        return sorted(row[0] for row in _reader(spark, step, False).select(column).collect())
    if op == "count":
        return _reader(spark, step, False).count()
    if op == "noop":
        frame = _reader(spark, step["source"], False)
        started = time.perf_counter()
        frame.write.format("noop").mode("overwrite").save()
        return {"seconds": time.perf_counter() - started}
    if op == "write":
        frame = _reader(spark, step["input"], False)
        sink = step["sink"]
        started = time.perf_counter()
        if "table" in sink:
            frame.writeTo(sink["table"]).options(**sink.get("options", {})).append()
        else:
            writer = frame.write.format(sink["format"]).mode(step.get("mode", "append"))
            writer.options(**sink.get("options", {})).save(sink["path"])
        return {"seconds": time.perf_counter() - started}
    if op == "stream":
        frame = _reader(spark, step["source"], True)
        sink = step["sink"]
        writer = frame.writeStream.option("checkpointLocation", step["checkpoint"]).options(**sink.get("options", {}))
        if sink.get("format"):
            writer = writer.format(sink["format"])
        writer = writer.trigger(availableNow=True)
        started = time.perf_counter()
        if "table" in sink:
            query = writer.toTable(sink["table"])
        else:
            query = writer.start(sink["path"]) if sink.get("path") else writer.start()
        query.awaitTermination()
        seconds = time.perf_counter() - started
        return {"seconds": seconds, "rows": sum(p["numInputRows"] for p in query.recentProgress),
                "batch_seconds": batch_seconds(query.recentProgress)}
    if op == "merge":
        return _merge_stream(spark, step)
    raise ValueError(f"unknown peer step op {op!r}")


def _delta_python(spark) -> None:
    """Make ``delta.tables`` importable: the ``delta-spark`` jar on ``spark.jars`` holds Delta's
    Python API (pure Python over the JVM), as it does for ``--packages io.delta:delta-spark_...``."""
    jars = [jar for jar in spark.conf.get("spark.jars", "").split(",") if "/delta-spark_" in jar]
    if not jars:
        raise ValueError("the merge step needs Delta's connector: no delta-spark jar on spark.jars")
    if jars[0] not in sys.path:
        sys.path.insert(0, jars[0])


def _merge_stream(spark, step: dict):
    _delta_python(spark)
    from delta.tables import DeltaTable
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    keys, columns, sequence, path = step["keys"], step["columns"], step["sequence"], step["path"]
    deletes, app_id = step.get("deletes", ["d"]), step.get("txnAppId")
    on = " AND ".join(f"t.{key} = s.{key}" for key in keys)  # plain column names
    newer = F.expr(f"t.{sequence} IS NULL OR s.{sequence} >= t.{sequence}")
    is_delete = F.coalesce(F.col(f"s.{step['opColumn']}").isin(deletes), F.lit(False))
    values = {column: f"s.{column}" for column in columns}
    last = Window.partitionBy(*keys).orderBy(F.col(sequence).desc())

    def apply(batch, batch_id: int) -> None:
        session = batch.sparkSession
        changes = batch.withColumn("__rank", F.row_number().over(last)).where("__rank = 1").drop("__rank")
        if app_id:
            session.conf.set("spark.databricks.delta.write.txnAppId", app_id)
            session.conf.set("spark.databricks.delta.write.txnVersion", str(batch_id))
        try:
            (DeltaTable.forPath(session, path).alias("t").merge(changes.alias("s"), on)
             .whenMatchedDelete(condition=is_delete & newer)
             .whenMatchedUpdate(condition=~is_delete & newer, set=values)
             .whenNotMatchedInsert(condition=~is_delete, values=values)
             .execute())
        finally:
            if app_id:
                session.conf.unset("spark.databricks.delta.write.txnAppId")
                session.conf.unset("spark.databricks.delta.write.txnVersion")

    frame = _reader(spark, step["source"], True)
    writer = (frame.writeStream.option("checkpointLocation", step["checkpoint"]).foreachBatch(apply)
              .trigger(availableNow=True))
    started = time.perf_counter()
    query = writer.start()
    query.awaitTermination()
    seconds = time.perf_counter() - started
    progress = [p for p in query.recentProgress if p["numInputRows"]]
    return {"seconds": seconds, "rows": sum(p["numInputRows"] for p in progress), "batches": len(progress)}


def main(argv: list[str]) -> int:
    with open(argv[1]) as handle:
        job = json.load(handle)
    from pyspark.sql import SparkSession

    builder = (SparkSession.builder.master(job.get("master", "local[2]")).appName("sparklink-peer")
               .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "2").config("spark.default.parallelism", "2")
               .config("spark.driver.memory", "1g"))
    for key, value in job.get("conf", {}).items():
        builder = builder.config(key, value)
    started = time.perf_counter()
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    results: list[dict] = [{"ok": True, "value": None, "seconds": time.perf_counter() - started}]  # the session
    try:
        for step in job["steps"]:
            started = time.perf_counter()
            try:
                value = _run(spark, step)
                results.append({"ok": True, "value": value, "seconds": time.perf_counter() - started})
            except Exception as error:  # reported to the caller with the step; the rest is skipped
                results.append({"ok": False, "error": f"{type(error).__name__}: {error}",
                                "trace": traceback.format_exc()[-4000:]})
                break
    finally:
        with open(argv[2], "w") as handle:
            json.dump(results, handle)
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
