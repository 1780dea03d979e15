"""Driver jobs for the cluster tests (run against spark://127.0.0.1:PORT)."""

from __future__ import annotations

import time


def files_to_files_and_postgres(spark, landing: str, out: str, checkpoint: str, dsn: str, table: str,
                                started_flag: str) -> None:
    """File source -> file sink (Parquet) and -> PostgreSQL (two-phase), both with
    Trigger.AvailableNow; ``started_flag`` appears once the file sink committed a batch."""
    def readings():
        return (spark.readStream.format("sparklink.files").option("path", landing).option("format", "json")
                .schema("seq LONG, payload STRING").option("maxFilesPerTrigger", 2).option("minFileAge", "0s").load())

    file_query = (readings().writeStream.format("sparklink.files").option("path", out).option("format", "parquet")
                  .option("bucketAssigner", "basepath").option("checkpointLocation", f"{checkpoint}/files")
                  .trigger(availableNow=True).start())
    pg_query = (readings().writeStream.format("sparklink.postgres").option("dsn", dsn).option("table", table)
                .option("semantic", "two-phase").option("checkpointLocation", f"{checkpoint}/pg")
                .trigger(availableNow=True).start())
    flagged = False
    while file_query.isActive or pg_query.isActive:
        if not flagged and file_query.lastProgress and file_query.lastProgress["batchId"] >= 0:
            with open(started_flag, "w", encoding="utf-8") as handle:
                handle.write(str(time.time()))
            flagged = True
        file_query.awaitTermination(0.5)
    for query in (file_query, pg_query):
        query.awaitTermination()


def s3_files_to_s3_files(spark, landing: str, out: str, checkpoint: str, s3_options: dict,
                         started_flag: str) -> None:
    """File source on S3 -> file sink on S3 (Parquet, ``_spark_metadata`` on), Trigger.AvailableNow;
    Spark's checkpoint stays on the shared local directory. ``started_flag`` appears once the sink
    committed a micro-batch."""
    query = (spark.readStream.format("sparklink.files").options(**s3_options).option("path", landing)
             .option("format", "json").schema("seq LONG, payload STRING").option("maxFilesPerTrigger", 2).load()
             .writeStream.format("sparklink.files").options(**s3_options).option("path", out)
             .option("format", "parquet").option("bucketAssigner", "basepath")
             .option("checkpointLocation", f"{checkpoint}/files").trigger(availableNow=True).start())
    flagged = False
    while query.isActive:
        if not flagged and query.lastProgress and query.lastProgress["batchId"] >= 0:
            with open(started_flag, "w", encoding="utf-8") as handle:
                handle.write(str(time.time()))
            flagged = True
        query.awaitTermination(0.5)
    query.awaitTermination()
