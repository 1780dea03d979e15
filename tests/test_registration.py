"""Registered formats can be used by several queries at once: the shared environment map Spark keeps
per Python data source already holds every key a starting streaming source adds (see
sparklink/spark/registration.py for the race this prevents)."""

from sparklink.spark.registration import (STREAMING_SOURCE_RUNNER_KEYS, registered_environment,
                                          streaming_source_runner_environment)


def test_every_format_is_registered_with_the_keys_the_streaming_source_runner_adds(spark):
    expected = streaming_source_runner_environment(spark)
    for name in ("sparklink.files", "sparklink.sequence", "sparklink.postgres", "sparklink.kafka"):
        environment = registered_environment(spark, name)
        assert set(STREAMING_SOURCE_RUNNER_KEYS) <= set(environment), name
        assert environment["SPARK_PYTHON_RUNTIME"] == expected["SPARK_PYTHON_RUNTIME"]
    assert not set(STREAMING_SOURCE_RUNNER_KEYS) & set(spark.sparkContext.environment), \
        "the SparkContext's environment must be restored after registering"


def test_a_running_streaming_source_adds_no_key_to_the_shared_map(spark, tmp_path):
    """If a Spark upgrade makes the source runner add another key, this fails and
    STREAMING_SOURCE_RUNNER_KEYS must grow: a key added while queries run is the race itself."""
    before = set(registered_environment(spark, "sparklink.sequence"))
    query = (spark.readStream.format("sparklink.sequence").option("numSplits", 2).option("rowsPerSplit", 10).load()
             .writeStream.format("noop").option("checkpointLocation", str(tmp_path / "checkpoint"))
             .trigger(availableNow=True).start())
    query.awaitTermination()
    # the runner replaced values in place (SPARK_LOCAL_DIRS now names the block manager's directory)
    assert set(registered_environment(spark, "sparklink.sequence")) == before
