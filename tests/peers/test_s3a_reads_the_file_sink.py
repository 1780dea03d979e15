"""Spark's own Parquet reader on S3A (``hadoop-aws`` 3.5.0, PySpark 4.3's Hadoop) reads what the
file sink wrote to S3 (SeaweedFS): a reader nobody here wrote, with its options at their defaults,
sees every id once. One peer JVM reads the sink's directory (through the sink's
``_spark_metadata`` log, as Spark's readers of a streaming sink's output do) and its files
listed by S3A alone (``pathGlobFilter``: the log not consulted)."""

from __future__ import annotations

import json

from sparklink.testing.peers import run_peer, s3a_conf

ROWS_PER_FILE, FILES = 25, 4


def test_spark_s3a_reads_every_id_of_the_s3_file_sink_once(spark, tmp_path, s3_server, s3_bucket, armed):
    src, ck = tmp_path / "in", tmp_path / "ck"
    src.mkdir()
    for index in range(FILES):
        ids = range(index * ROWS_PER_FILE, (index + 1) * ROWS_PER_FILE)
        (src / f"f-{index}.json").write_text("".join(json.dumps({"id": i, "k": f"k-{i % 7}"}) + "\n" for i in ids))
    out = f"s3a://{s3_bucket}/events"  # as a user whose readers are Spark's writes it: the log names s3a:// URIs
    frame = spark.readStream.format("json").schema("id long, k string").option("maxFilesPerTrigger", 1).load(str(src))
    writer = (frame.writeStream.format("sparklink.files").option("path", out).option("format", "parquet")
              .option("bucketAssigner", "column").option("bucketColumn", "k").options(**s3_server.options())
              .option("checkpointLocation", str(ck)).trigger(availableNow=True))
    with armed("writer.after_write:raise@1", attempt=0):  # micro-batch 1's first task attempts fail: retried
        writer.start().awaitTermination()

    s3a_out = out
    conf = s3a_conf(s3_server.endpoint, s3_server.access_key_id, s3_server.secret_access_key, s3_server.region)
    run = run_peer("hadoop-aws", conf, [
        {"op": "ids", "format": "parquet", "path": s3a_out},
        {"op": "ids", "format": "parquet", "path": s3a_out, "options": {"recursiveFileLookup": "true"}},
        {"op": "sql", "query": f"SELECT count(DISTINCT _metadata.file_path) FROM parquet.`{s3a_out}`"},
    ])
    expected = list(range(FILES * ROWS_PER_FILE))
    through_log, listed, (files,) = run.values[0], run.values[1], run.values[2][0]
    assert through_log == expected, f"Spark on S3A, through _spark_metadata: {len(through_log)} rows"
    assert listed == expected, f"Spark on S3A, files listed: {len(listed)} rows"
    assert files >= FILES  # one file per bucket and micro-batch at least
