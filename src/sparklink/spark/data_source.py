"""``as_data_source``: turn a sparklink Source and/or Sink into a PySpark ``DataSource``.

The returned class is what ``spark.dataSource.register`` takes. Spark creates an instance on
the driver for every read, write and micro-batch with the user's options; the instance builds
the sparklink Source or Sink from them, so bad options fail when the query starts.

PySpark pickles the class (by value) and unpickles it in a fresh Python process for each
streaming query's planning; the names its methods use as globals are pickled as references that
unpickling imports. So the methods import the reading or writing adapter themselves: planning a
read imports the source side only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, cast

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader
from pyspark.sql.types import StructType

from sparklink.errors import ConfigError
from sparklink.source.source import Boundedness, Source

if TYPE_CHECKING:  # the sink side is imported where it is used: planning a read needs none of it
    from sparklink.sink.sink import Sink
    from sparklink.spark.sink_adapter import SinkBatchWriter, SinkStreamWriter

SourceFactory = Callable[[Mapping[str, str]], Source]
SinkFactory = Callable[[Mapping[str, str], StructType], "Sink"]


def as_data_source(source: SourceFactory | type[Sink] | None, name: str, *,
                   sink: SinkFactory | None = None, records_txn_itself: bool = False) -> type[DataSource]:
    """A PySpark DataSource class named ``name`` serving ``source`` and/or ``sink``.

    ``source`` is a Source subclass (or a callable ``options -> Source``); ``sink`` a Sink
    subclass (or a callable ``(options, schema) -> Sink``). A Sink subclass may also be given
    as the first argument for a write-only format. ``records_txn_itself``: the sink keeps a
    ``df.write``'s ``txnAppId`` / ``txnVersion`` in its own commit (the connector contract's
    capability, :class:`sparklink.contract.FormatSpec`), so the SDK hands it those options.
    """
    from sparklink.sink.sink import Sink

    if isinstance(source, type) and issubclass(source, Sink):
        source, sink = None, source
    if source is None and sink is None:
        raise ConfigError("as_data_source", "needs a source, a sink or both")
    # a Sink subclass given first has just moved to sink: what is left is a source factory or None
    source_factory, sink_factory = cast("SourceFactory | None", source), sink

    class _SparklinkDataSource(DataSource):
        #: the sink factory (a Sink subclass, or a callable with a ``validate`` of the same shape)
        sparklink_sink = sink_factory
        #: the source factory (None: a write-only format, which never starts a streaming source)
        sparklink_source = source_factory

        @classmethod
        def name(cls) -> str:
            return name

        def _source(self) -> Source:
            if source_factory is None:
                raise ConfigError("format", f"'{name}' cannot be read; it is a sink only")
            return source_factory(self.options)

        def _sink(self, schema: StructType, options: Mapping[str, str] | None = None) -> Sink:
            if sink_factory is None:
                raise ConfigError("format", f"'{name}' cannot be written; it is a source only")
            return sink_factory(self.options if options is None else options, schema)

        def schema(self) -> StructType:
            return self._source().schema()

        def reader(self, schema: StructType) -> DataSourceReader:
            from sparklink.spark.source_adapter import SourceBatchReader

            return SourceBatchReader(self._source(), schema)

        def streamReader(self, schema: StructType) -> DataSourceStreamReader:
            from sparklink.spark.source_adapter import SourceStreamReader

            source_instance = self._source()
            if source_instance.boundedness is Boundedness.BOUNDED:
                raise ConfigError("format", f"'{name}' is bounded; read it with spark.read, not spark.readStream")
            return SourceStreamReader(source_instance, schema)

        def writer(self, schema: StructType, overwrite: bool) -> SinkBatchWriter:
            from sparklink.sink.txn import split_txn_options
            from sparklink.spark.sink_adapter import SinkBatchWriter

            if records_txn_itself:
                txn, options = None, None  # the sink keeps txnAppId / txnVersion in its own commit
            else:
                txn, options = split_txn_options(self.options)  # txnAppId / txnVersion are the SDK's
            sink_instance = self._sink(schema, options)
            if overwrite:
                prepare = getattr(sink_instance, "prepare_overwrite", None)
                if prepare is None:
                    raise ConfigError("mode", f"'{name}' does not support mode 'overwrite'", "append, errorifexists, ignore")
                prepare()
            return SinkBatchWriter(sink_instance, txn)

        def streamWriter(self, schema: StructType, overwrite: bool) -> SinkStreamWriter:
            from sparklink.options import checkpoint_location
            from sparklink.sink.txn import refuse_in_stream, split_txn_options
            from sparklink.spark.checkpoint import query_id_from_checkpoint
            from sparklink.spark.sink_adapter import SinkStreamWriter

            if overwrite:
                raise ConfigError("outputMode", f"'{name}' supports append output only", "append")
            refuse_in_stream(split_txn_options(self.options)[0])
            sink_instance = self._sink(schema)
            checkpoint = checkpoint_location(self.options)
            query_id = query_id_from_checkpoint(checkpoint) if checkpoint else None
            return SinkStreamWriter(sink_instance, query_id=query_id)

    _SparklinkDataSource.__name__ = _SparklinkDataSource.__qualname__ = f"DataSource_{name.replace('.', '_')}"
    return _SparklinkDataSource
