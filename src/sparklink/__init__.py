"""sparklink: exactly-once sources and sinks for Spark Structured Streaming, on Flink's model.

``sparklink.register(spark)`` registers every format; calling it twice is fine.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sparklink.errors import CommitError, ConcurrentWriterError, ConfigError, DataError, SparklinkError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.datasource import DataSource

__version__ = "0.1.0"
version = __version__

__all__ = ["CommitError", "ConcurrentWriterError", "ConfigError", "DataError", "SparklinkError", "register",
           "data_sources", "version", "__version__"]


def data_sources() -> list[type[DataSource]]:
    """Every PySpark DataSource class sparklink provides (built on each call): one per format of
    the connector list (:mod:`sparklink.connectors`), and the end of input's
    (:mod:`sparklink.spark.end_of_input_server`)."""
    from sparklink.connectors import formats
    from sparklink.contract import LazyFactory
    from sparklink.spark import as_data_source, end_of_input_server

    # the source and sink by reference, imported where they are used: a query's planning process
    # imports only the side it plans (see LazyFactory)
    found = [as_data_source(LazyFactory(spec.source) if spec.source else None, spec.name,
                            sink=LazyFactory(spec.sink) if spec.sink else None,
                            records_txn_itself=spec.records_txn_itself)
             for spec in formats()]
    return found + end_of_input_server.data_sources()


def register(spark: "SparkSession", *, end_of_input: bool = True) -> None:
    """Register every sparklink format with ``spark`` (idempotent).

    Each format is registered through :func:`sparklink.spark.registration.register_data_source`, so
    several queries may use one format at once. Also makes ``append`` the default ``df.write`` mode for ``sparklink.*`` formats, since Spark
    refuses its own default (``errorifexists``) for Python data sources; see
    :mod:`sparklink.spark.save_mode`. And installs the end of input of streaming sinks: when a
    query ends without a crash, what it committed is made visible (the file sink finishes its
    held and carried files); see :mod:`sparklink.spark.end_of_input`. ``end_of_input=False``
    leaves that out for this session for good (a test harness that inspects what a query left
    carried; ``sparklink.files.finish`` still finishes by hand).

    ``spark`` may be a classic session or a Spark Connect client session
    (``SparkSession.builder.remote(...)``), with the same result; a Connect session is served
    without any JVM attribute (:mod:`sparklink.spark.connect`, docs/connect.md).
    """
    from sparklink.spark import end_of_input as end_of_input_module  # not the parameter's name
    from sparklink.spark import save_mode
    from sparklink.spark.connect import install_default_save_mode, is_connect_session
    from sparklink.spark.registration import register_data_source

    if is_connect_session(spark):
        install_default_save_mode()  # Connect's own DataFrameWriter
    else:
        save_mode.install()
    register_data_source(spark, *data_sources())
    end_of_input_module.install(spark, enabled=end_of_input)
