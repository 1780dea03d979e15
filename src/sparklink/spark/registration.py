"""Registering a Python data source so that concurrent queries can share it (runs on the driver).

Why this exists: Spark keeps one ``PythonFunction`` per registered Python data source, and its
``envVars`` is a plain ``java.util.HashMap`` shared by every query that uses the format. When a
streaming query starts its source, ``PythonStreamingSourceRunner.init`` (Spark 4.3, driver side)
*adds* four keys to that shared map: ``SPARK_LOCAL_DIRS``, ``SPARK_AUTH_SOCKET_TIMEOUT``,
``SPARK_BUFFER_SIZE`` and ``SPARK_PYTHON_RUNTIME``. If another query is serializing a task at that
moment (its reader or writer factory carries the same map), ``HashMap.writeObject`` records one size
and then writes another number of entries, and the task fails on the executor with
``java.io.OptionalDataException``. Two queries starting together on one format (a file source
feeding a file sink and a PostgreSQL sink) hit it in the first micro-batch.

The cure is to register the data source with those four keys already in its map: the runner's
``put`` then replaces a value in place, which changes neither the
map's size nor its layout, so a concurrent serialization stays consistent.

A Spark Connect session takes another path to the same end (:mod:`sparklink.spark.connect`):
the server registers the class with an empty map of its own, which the client cannot fill, so
the server is made to add the keys once, right after registering, before any query of the user.
"""

from __future__ import annotations

import tempfile
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: The keys ``PythonStreamingSourceRunner.init`` adds to the data source's shared environment map.
STREAMING_SOURCE_RUNNER_KEYS = ("SPARK_LOCAL_DIRS", "SPARK_AUTH_SOCKET_TIMEOUT", "SPARK_BUFFER_SIZE",
                                "SPARK_PYTHON_RUNTIME")


def streaming_source_runner_environment(spark: "SparkSession") -> dict[str, str]:
    """The four entries Spark's streaming source runner puts into the environment map.

    The timeout, buffer size and runtime are read from this driver's configuration as the runner
    reads them. ``SPARK_LOCAL_DIRS`` holds ``spark.local.dir`` (or the temporary directory) as a
    stand-in: the runner and every executor-side Python runner overwrite it with the block
    manager's directories before they start a worker, so no worker ever sees the stand-in. (The
    block manager itself cannot be read over Py4J: reflecting on it needs protobuf classes the
    PySpark jars do not ship.)
    """
    spark_conf = spark.sparkContext._jsc.sc().conf()
    return {
        "SPARK_LOCAL_DIRS": spark_conf.get("spark.local.dir", tempfile.gettempdir()),
        "SPARK_AUTH_SOCKET_TIMEOUT": str(spark_conf.getTimeAsSeconds("spark.python.authenticate.socketTimeout",
                                                                     "15s")),
        "SPARK_BUFFER_SIZE": str(spark_conf.getInt("spark.buffer.size", 65536)),
        "SPARK_PYTHON_RUNTIME": "PYTHON_WORKER",
    }


def register_data_source(spark: "SparkSession", *data_sources: type) -> None:
    """``spark.dataSource.register(data_source)`` for each class given, with the environment map
    already holding every key Spark's streaming source runner adds, so that queries sharing the
    format can start concurrently.

    ``SparkContext.environment`` is what PySpark copies into a new data source's map; the keys are
    added to it for these registrations and the dictionary is restored afterwards, so Python UDFs
    and other functions see the environment they saw before. A Spark Connect session (no
    SparkContext in this process) is served by :func:`sparklink.spark.connect.register_on_connect`.
    """
    from sparklink.spark.connect import is_connect_session, register_on_connect

    if is_connect_session(spark):
        register_on_connect(spark, *data_sources)
        return
    environment = spark.sparkContext.environment
    saved = dict(environment)
    environment.update(streaming_source_runner_environment(spark))
    try:
        for data_source in data_sources:
            spark.dataSource.register(data_source)
    finally:
        environment.clear()
        environment.update(saved)


def registered_environment(spark: "SparkSession", name: str) -> dict[str, str]:
    """The environment map Spark holds for the registered Python data source ``name`` (a copy)."""
    builder = spark._jsparkSession.sessionState().dataSourceManager().lookupDataSource(name)
    return dict(builder.dataSourceCls().envVars())
