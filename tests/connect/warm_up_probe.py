"""A Python data source with a streaming source that refuses the warm-up option as every
sparklink source does (driver side, in the worker Spark's streaming source runner starts).
Imported by name on the Connect server (its Python workers have the pytest root on ``PYTHONPATH``)."""

from __future__ import annotations

from collections.abc import Iterator

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

from sparklink.spark.connect import WARM_UP_OPTION

REFUSAL = "is not an option of the warm-up probe"


class _RefusingStreamReader(DataSourceStreamReader):
    def __init__(self, options: dict[str, str]):
        if WARM_UP_OPTION.lower() in {key.lower() for key in options}:
            raise ValueError(f"option '{WARM_UP_OPTION}' {REFUSAL}")

    def initialOffset(self) -> dict:  # noqa: N802 - PySpark's name
        return {"n": 0}

    def latestOffset(self) -> dict:  # noqa: N802 - PySpark's name
        return {"n": 0}

    def read(self, partition: InputPartition) -> Iterator[tuple[int]]:
        return iter(())


class WarmUpProbe(DataSource):
    """A format with a streaming source and nothing else."""

    @classmethod
    def name(cls) -> str:
        return "sparklink_test_warm_up_probe"

    def schema(self) -> str:
        return "n int"

    def streamReader(self, schema) -> DataSourceStreamReader:  # noqa: N802 - PySpark's name
        return _RefusingStreamReader(dict(self.options))
