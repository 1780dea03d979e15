"""Driver jobs for the cluster tests (run against spark://127.0.0.1:PORT)."""

from __future__ import annotations

import time


def local_and_s3_pipelines(spark, local: dict, s3: dict, started_flag: str) -> None:
    """Three queries in one driver, each with Trigger.AvailableNow:

    * ``local``: file source -> file sink (Parquet) and -> PostgreSQL (two-phase);
    * ``s3``: file source on S3 -> file sink on S3 (Parquet, ``_spark_metadata`` on), Spark's
      checkpoint on the shared local directory.

    ``started_flag`` appears once both file sinks committed a micro-batch (the test then kills a
    worker, mid-stream for every query)."""
    def readings(path: str, options: dict):
        return (spark.readStream.format("sparklink.files").options(**options).option("path", path)
                .option("format", "json").schema("seq LONG, payload STRING").option("maxFilesPerTrigger", 2)
                .option("minFileAge", "0s").load())

    def to_files(path: str, landing: str, checkpoint: str, options: dict):
        return (readings(landing, options).writeStream.format("sparklink.files").options(**options)
                .option("path", path).option("format", "parquet").option("bucketAssigner", "basepath")
                .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())

    file_query = to_files(local["out"], local["landing"], f"{local['checkpoint']}/files", {})
    pg_query = (readings(local["landing"], {}).writeStream.format("sparklink.postgres").option("dsn", local["dsn"])
                .option("table", local["table"]).option("semantic", "two-phase")
                .option("checkpointLocation", f"{local['checkpoint']}/pg").trigger(availableNow=True).start())
    s3_query = to_files(s3["out"], s3["landing"], f"{s3['checkpoint']}/files", s3["s3_options"])
    queries = (file_query, pg_query, s3_query)

    def committed(query) -> bool:
        return bool(query.lastProgress) and query.lastProgress["batchId"] >= 0

    flagged = False
    while any(query.isActive for query in queries):
        if not flagged and committed(file_query) and committed(s3_query):
            with open(started_flag, "w", encoding="utf-8") as handle:
                handle.write(str(time.time()))
            flagged = True
        file_query.awaitTermination(0.5)
    for query in queries:
        query.awaitTermination()
