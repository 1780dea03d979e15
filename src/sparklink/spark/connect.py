"""Spark Connect sessions: what ``sparklink.register(spark)`` does for a client of a Connect
server (client side, once per ``register``).

A Connect session (``SparkSession.builder.remote("sc://...")``) is a gRPC client: the driver,
its JVM and its Python workers are the server's. Nothing here touches ``sparkContext``, ``_jsc``,
``_jvm`` or ``_jsparkSession`` (a Connect session has none); the classic path is in
:mod:`sparklink.spark.registration`.

1. **Formats.** ``spark.dataSource.register(cls)`` pickles each class and sends it to the
   server, whose Python workers import ``sparklink`` (so sparklink must be installed in the
   server's Python, the same version as the client's).
2. **The shared environment map** (the race described in :mod:`sparklink.spark.registration`).
   The server registers a Python data source with an empty ``java.util.HashMap`` as its
   environment, shared by every query of the session that uses the format, and the first
   streaming source of the format to start adds four keys to it, exactly as in a classic
   session. A client cannot put keys in that map, so :func:`warm_streaming_sources` makes the
   server do it once, right after registering: for every format it starts a query that reads the
   format as a stream with an option no source accepts (sink-only formats are skipped: their map
   never gets keys). Spark's streaming source runner adds the four keys before its Python worker
   starts, then the worker refuses the option and the query ends. From
   then on every start of a source of that format replaces values in place, as after the classic
   cure. (The warm-up queries run at the same time, each ends as its source starts.)
3. **``df.write``'s default mode.** Connect has its own ``DataFrameWriter`` class;
   :func:`install_default_save_mode` gives it the same default as
   :mod:`sparklink.spark.save_mode` gives the classic one (``append`` for ``sparklink.*``
   formats when no mode is set).
"""

from __future__ import annotations

import functools
import logging
import uuid
from typing import Any, cast

logger = logging.getLogger("sparklink.connect")

SPARKLINK_PREFIX = "sparklink."
_INSTALLED = "_sparklink_default_mode_installed"
#: The schema a warm-up read declares (so that Spark asks the source for none).
WARM_UP_SCHEMA = "sparklink_warm_up int"
#: An option no source accepts: every sparklink source refuses it as soon as its reader is made.
WARM_UP_OPTION = "sparklinkWarmUp"


def is_connect_session(spark: Any) -> bool:
    """Whether ``spark`` is a Spark Connect client session (its class lives in ``pyspark.sql.connect``).
    Decided from the class alone: no attribute of the session is touched."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def install_default_save_mode() -> None:
    """``append`` as the default ``save()`` mode of Connect's ``DataFrameWriter`` for
    ``sparklink.*`` formats (once per process; an explicit mode always wins)."""
    from pyspark.sql.connect.readwriter import DataFrameWriter

    if getattr(DataFrameWriter, _INSTALLED, False):
        return
    original_save = DataFrameWriter.save

    @functools.wraps(original_save)
    def save(self, path=None, format=None, mode=None, partitionBy=None, **options):  # noqa: A002 - PySpark's names
        chosen = format or self._write.source
        if (mode is None and self._write.mode is None and isinstance(chosen, str)
                and chosen.lower().startswith(SPARKLINK_PREFIX)):
            mode = "append"
        return original_save(self, path, format, mode, partitionBy, **options)

    DataFrameWriter.save = save  # type: ignore[method-assign]
    setattr(DataFrameWriter, _INSTALLED, True)


def register_on_connect(spark: Any, *data_sources: type) -> None:
    """Register ``data_sources`` with the Connect session ``spark`` and warm their environment maps."""
    for data_source in data_sources:
        spark.dataSource.register(data_source)
    warm_streaming_sources(spark, [cast(Any, data_source).name() for data_source in data_sources
                                   if _may_stream(data_source)])


def _may_stream(data_source: type) -> bool:
    """Whether ``data_source`` can start a streaming source (only those get keys added to their
    map): sparklink's classes say so; any other class does when it overrides a stream reader."""
    from pyspark.sql.datasource import DataSource

    if hasattr(data_source, "sparklink_source"):
        return data_source.sparklink_source is not None
    return (getattr(data_source, "streamReader", None) is not DataSource.streamReader
            or getattr(data_source, "simpleStreamReader", None) is not DataSource.simpleStreamReader)


def warm_streaming_sources(spark: Any, names: list[str]) -> None:
    """Start, at once, one streaming query per format that reads it with an option no source
    accepts (:data:`WARM_UP_OPTION`), so that the
    server's streaming source runner adds its keys to the format's shared environment map now
    (see the module's docstring); wait until every one ended. A warm-up query that does not fail
    (a format that ignores the option) ends by itself (``availableNow``) or is stopped."""
    from pyspark.errors import PySparkException

    force_delete = "spark.sql.streaming.forceDeleteTempCheckpointLocation"
    before = spark.conf.get(force_delete, None)
    spark.conf.set(force_delete, "true")  # the warm-ups' temporary checkpoints are removed although they fail
    try:
        queries = []
        for name in names:
            frame = spark.readStream.format(name).schema(WARM_UP_SCHEMA).option(WARM_UP_OPTION, "true").load()
            queries.append(frame.writeStream.format("noop").queryName(f"sparklink_warm_up_{uuid.uuid4().hex[:12]}")
                           .trigger(availableNow=True).start())
        for name, query in zip(names, queries, strict=True):
            try:
                query.awaitTermination()
            except PySparkException as exc:  # the expected end: the source refused the option
                logger.debug("warm-up of %s ended: %s", name, _refusal_line(exc))
            finally:
                if query.isActive:
                    query.stop()
    finally:
        if before is None:
            spark.conf.unset(force_delete)
        else:
            spark.conf.set(force_delete, before)


def _refusal_line(exc: BaseException) -> str:
    """The line of a warm-up query's error that names the warm-up option (the source's refusal),
    else its first line."""
    lines = str(exc).splitlines() or [type(exc).__name__]
    return next((line.strip() for line in lines if WARM_UP_OPTION in line), lines[0])


def format_exists_on_connect(spark: Any, name: str) -> bool:
    """Whether the Connect server resolves ``name`` as a data source (a registered Python data
    source, or a format on the server's class path): the schema of a read with no options is
    asked for, and only Spark's "no such data source" counts as absent (any other refusal, such
    as a missing option, comes from a data source that exists)."""
    from pyspark.errors import PySparkException

    try:
        spark.read.format(name).load().schema  # noqa: B018 - asking for the schema is the analysis
    except PySparkException as exc:
        condition = exc.getCondition() if hasattr(exc, "getCondition") else None
        return condition != "DATA_SOURCE_NOT_FOUND" and "DATA_SOURCE_NOT_FOUND" not in str(exc).split("\n", 1)[0]
    return True
