"""The server side of the end of input through Spark Connect (a Python worker of the server's
driver JVM): the data source ``sparklink.endOfInput`` that a Connect client reads
(:func:`sparklink.spark.end_of_input.run_on_server`) to run a query's noted end of input
(option ``queryId``) or ``sparklink.files.finish`` of an output (option ``path``) where the
notes and the files are. Registered by ``sparklink.register`` (:func:`data_sources`)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from sparklink.spark.driver import current_driver
from sparklink.spark.end_of_input import DATA_SOURCE, run_end_of_input


class _Outcome(InputPartition):
    def __init__(self, rows: list[tuple[str, str, str | None]]):
        super().__init__(0)
        self.rows = rows


class _EndOfInputReader(DataSourceReader):
    """Its ``partitions()`` runs the work, once, in a Python worker of the driver's JVM (Spark
    plans a Python data source's read on the driver); ``read()`` hands back what it did."""

    def __init__(self, options: dict[str, str]):
        self.options = options

    def partitions(self) -> list[InputPartition]:
        options = {k.lower(): v for k, v in self.options.items()}
        active = frozenset(q for q in options.pop("activequeries", "").split(",") if q)
        driver = current_driver()
        query_id, path = options.pop("queryid", None), options.pop("path", None)
        if (query_id is None) == (path is None):
            from sparklink.errors import ConfigError

            raise ConfigError("queryId", f"{DATA_SOURCE} takes either 'queryId' or 'path'")
        if query_id is not None:
            said = run_end_of_input(query_id, driver, lambda: active)
            return [_Outcome([(query_id, said, None)] if said is not None else [])]
        from sparklink.files.sink.finish import finish_output
        from sparklink.storage import S3_OPTIONS

        settings = {key: self.options[key] for key in self.options
                    if key.lower() in {o.lower() for o in S3_OPTIONS}}
        assert path is not None
        result = finish_output(path, driver=driver, active_queries=active, options=settings)
        return [_Outcome([(result.path, result.summary(), json.dumps(result.to_json()))])]

    def read(self, partition: InputPartition) -> Iterator[tuple[str, str, str | None]]:
        assert isinstance(partition, _Outcome)
        yield from partition.rows


class EndOfInputDataSource(DataSource):
    """``spark.read.format("sparklink.endOfInput")``: runs an end of input (option ``queryId``)
    or ``sparklink.files.finish`` (option ``path``) on the driver of the session's server; used
    by Spark Connect clients (:func:`run_on_server`)."""

    @classmethod
    def name(cls) -> str:
        return DATA_SOURCE

    def schema(self) -> str:
        return "target string, summary string, result string"

    def reader(self, schema: Any) -> DataSourceReader:
        return _EndOfInputReader(dict(self.options))


def data_sources() -> list[type]:
    """What ``sparklink.register`` registers for the end of input."""
    return [EndOfInputDataSource]
