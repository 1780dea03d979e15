"""The checks of ``sparklink run`` (and all of ``--check``): options, paths, SQL (driver side).

Run once per ``sparklink run``, before any query starts:

1. :func:`check_connectors` (before Spark starts): the options of every sparklink source and
   sink are parsed in this process with the keys as the pipeline file spells them (Spark hands
   a data source its keys lower-cased), so ``maxFilesPerTriger`` is named as written, with the
   closest known key; every path a file source reads must exist.
2. :func:`analyse` (on a SparkSession): the sources become temporary views and the transform
   is analysed, which resolves every table, column and function without starting a query;
   every sparklink sink's options are then parsed by the connector's own option parsing
   (:func:`sink_option_check`: the same code a query's start runs, unknown keys refused with the
   closest known one) against the transform's columns.

Every problem is a :class:`PipelineError` naming the file, the key and its line.
"""

from __future__ import annotations

import difflib
import functools
import os
from collections.abc import Callable
from typing import Any

from sparklink.cli.pipeline_config import PipelineError, PipelineSpec, locate
from sparklink.connectors import format_named
from sparklink.contract import resolve
from sparklink.errors import SparklinkError

FILES_FORMAT = "sparklink.files"


def _data_source_classes() -> dict[str, Any]:
    """The classes of ``as_data_source`` by name (DataSource subclasses; their ``_source`` and
    ``sparklink_sink`` are not in DataSource's type, hence Any)."""
    import sparklink

    return {cls.name(): cls for cls in sparklink.data_sources()}


def _error(spec: PipelineSpec, key: str, problem: str) -> PipelineError:
    return PipelineError(spec.path, key, locate(spec.path, key), problem)


def check_connectors(spec: PipelineSpec, *, check_paths: bool = True) -> None:
    """Options and paths of every sparklink source and sink, without Spark (no JVM starts).
    ``check_paths=False`` (a Spark Connect server runs the pipeline: the paths are the server's)
    leaves the source paths to the server's own check when the sources are analysed."""
    classes = _data_source_classes()
    formats = [(f"sources.{s.name}.format", s.format) for s in spec.sources]
    formats += [(f"sinks[{i}].format", s.format) for i, s in enumerate(spec.sinks)]
    for key, name in formats:
        if name.lower().startswith("sparklink.") and name not in classes:
            close = difflib.get_close_matches(name, sorted(classes), n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise _error(spec, key, f"'{name}' is not a sparklink format{hint}; sparklink has {', '.join(sorted(classes))}")
    for source in spec.sources:
        cls = classes.get(source.format)
        if cls is None:
            continue  # Spark's own formats are checked by Spark when the query starts
        key = f"sources.{source.name}.options"
        try:
            built = cls(options=dict(source.options))._source()
        except SparklinkError as exc:
            raise _error(spec, key, str(exc)) from None
        for path in _source_paths(built) if check_paths else ():
            if not os.path.exists(path):
                raise _error(spec, key, f"path '{path}' does not exist (working directory {os.getcwd()})")
    for index, sink in enumerate(spec.sinks):
        declared = format_named(sink.format)
        if declared is None or declared.sink_options is None:
            continue  # not a sparklink sink: Spark checks it when the query starts
        key = f"sinks[{index}].options"
        _checked(spec, key, functools.partial(resolve(declared.sink_options.table).options, sink.options))
        if sink.format == FILES_FORMAT:  # its values too: the file sink's options need no input schema
            from sparklink.files.sink.connector import FileSinkConfig

            _checked(spec, key, functools.partial(FileSinkConfig.from_options, sink.options))


def _source_paths(source: Any) -> tuple[str, ...]:
    from sparklink.files.source.connector import FileSourceConnector

    return source.config.paths if isinstance(source, FileSourceConnector) else ()


def _checked(spec: PipelineSpec, key: str, check: Callable[[], Any]) -> Any:
    try:
        return check()
    except SparklinkError as exc:
        raise _error(spec, key, str(exc)) from None


def analyse(spark, spec: PipelineSpec):
    """The transform's DataFrame, analysed (no query starts); each sparklink sink's own
    :meth:`~sparklink.sink.Sink.validate` against its schema."""
    from pyspark.errors import PySparkException

    for source in spec.sources:
        try:
            reader = spark.readStream.format(source.format).options(**source.options)
            if source.schema:
                reader = reader.schema(source.schema)
            reader.load().createOrReplaceTempView(source.name)
        except PySparkException as exc:
            raise _error(spec, f"sources.{source.name}", first_lines(exc)) from None
    try:
        frame = spark.sql(spec.sql) if spec.sql else spark.table(spec.sources[0].name)
        schema = frame.schema
    except PySparkException as exc:
        raise _error(spec, "transform.sql", first_lines(exc)) from None
    for index, sink in enumerate(spec.sinks):
        if not format_exists(spark, sink.format):
            raise _error(spec, f"sinks[{index}].format", f"'{sink.format}' is not a data source Spark knows "
                         "(neither a registered Python data source nor a format on Spark's class path)")
        key = f"sinks[{index}].options"
        options = {k: v for k, v in sink.options.items() if k.lower() != "checkpointlocation"}
        check = sink_option_check(sink.format)
        if check is not None:  # a sparklink sink: its own parsing, without side effects
            _checked(spec, key, functools.partial(check, options, schema))
    return frame


def sink_option_check(name: str) -> Callable[[dict[str, str], Any], None] | None:
    """How ``sparklink run --check`` parses the options of the sparklink sink ``name`` (a
    callable ``(options, schema)`` raising ConfigError), None for a format that is not a
    sparklink sink: the check its connector contract declares (``sink_check``), else the sink
    class's own ``validate``; ``txnAppId`` / ``txnVersion`` are refused on every sink, as for
    any stream."""
    from sparklink.sink.txn import refuse_in_stream, split_txn_options

    declared = format_named(name)
    if declared is None or declared.sink is None:
        return None
    parse = resolve(declared.sink_check) if declared.sink_check else resolve(declared.sink).validate

    def check(options: dict[str, str], schema) -> None:
        refuse_in_stream(split_txn_options(options)[0])
        parse(options, schema)

    return check


def format_exists(spark, name: str) -> bool:
    """Whether ``df.write.format(name)`` resolves in ``spark``, as Spark resolves it when a query
    starts: a registered Python data source, or a JVM format (built-in, or on the class path)."""
    from sparklink.spark.connect import format_exists_on_connect, is_connect_session

    if is_connect_session(spark):
        return format_exists_on_connect(spark, name)
    from py4j.protocol import Py4JJavaError

    session = spark._jsparkSession
    if session.sessionState().dataSourceManager().dataSourceExists(name):
        return True
    try:
        spark._jvm.org.apache.spark.sql.execution.datasources.DataSource.lookupDataSource(
            name, session.sessionState().conf())
    except Py4JJavaError:
        return False
    return True


def first_lines(exc: BaseException, limit: int = 2) -> str:
    """The first ``limit`` non-empty lines of an exception's message (Spark appends plans and
    JVM stack traces below the cause)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return " ".join(lines[:limit]) if lines else type(exc).__name__
