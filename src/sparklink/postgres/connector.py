"""The ``sparklink.postgres`` format: picks the sink by ``semantic``; the table source.

Driver side: :func:`PostgresSinkConnector` is called by the PySpark adapter for every write
(each micro-batch) with the user's options and the DataFrame schema.
"""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.sql.types import StructType

from sparklink.postgres.at_least_once_sink import AtLeastOnceSink
from sparklink.postgres.sink_base import PostgresSink
from sparklink.postgres.sink_config import (
    SEMANTIC_AT_LEAST_ONCE,
    SEMANTIC_TWO_PHASE,
    SEMANTIC_UPSERT,
    SEMANTIC_WRITE_AHEAD,
    PostgresSinkConfig,
)
from sparklink.postgres.table_source import PostgresTableSource
from sparklink.postgres.two_phase_sink import TwoPhaseSink
from sparklink.postgres.upsert_sink import UpsertSink
from sparklink.postgres.write_ahead_sink import WriteAheadSink

SINKS: dict[str, type[PostgresSink]] = {
    SEMANTIC_UPSERT: UpsertSink,
    SEMANTIC_TWO_PHASE: TwoPhaseSink,
    SEMANTIC_WRITE_AHEAD: WriteAheadSink,
    SEMANTIC_AT_LEAST_ONCE: AtLeastOnceSink,
}


def PostgresSinkConnector(options: Mapping[str, str] | None, schema: StructType) -> PostgresSink:  # noqa: N802 - named as the class it stands for
    """The sink for ``options['semantic']`` (default upsert), validated and prepared."""
    config = PostgresSinkConfig.from_options(options)
    return SINKS[config.semantic](options, schema, config)


def _validate(options: Mapping[str, str] | None, schema: StructType) -> None:
    """:meth:`Sink.validate` of the PostgreSQL sink: its options and key columns (no connection)."""
    PostgresSinkConfig.from_options(options).validate_schema(schema)


PostgresSinkConnector.validate = _validate  # type: ignore[attr-defined]  # the factory validates as a Sink class does
PostgresSourceConnector = PostgresTableSource

__all__ = ["PostgresSinkConnector", "PostgresSourceConnector", "SINKS"]
