"""PySpark readers that run a :class:`~sparklink.source.Source` (the read half of the adapter).

``partitions`` / ``latestOffset`` run on the driver (in a Python worker the driver's JVM
starts, one per query for streams); ``read`` runs on executors, one call per task (its splits one
after the other).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from typing import Any

from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming import datasource as spark_limits
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadMaxBytes,
    ReadMaxFiles,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from sparklink.source.enumerator import READ_ALL, Offset, ReadLimit, SplitEnumerator
from sparklink.source.source import Source
from sparklink.source.split import Split


class SplitPartition(InputPartition):
    """The splits one Spark task reads, in order, on their way to an executor (serialised as a
    JSON list inside the partition; :meth:`SplitEnumerator.group_splits` chose them)."""

    def __init__(self, splits: list[Split]):
        super().__init__("[" + ",".join(split.to_json() for split in splits) + "]")

    @property
    def splits(self) -> list[Split]:
        return [Split.from_data(item) for item in json.loads(self.value)]


def split_partitions(enumerator: SplitEnumerator, start: Offset, end: Offset) -> list[SplitPartition]:
    """Driver side: the Spark partitions of the batch ``(start, end]``."""
    return [SplitPartition(group) for group in enumerator.group_splits(enumerator.plan_splits(start, end))]


def read_split(source: Source, schema: StructType, partition: InputPartition) -> Iterator[Any]:
    """Executor side: yield the records of one task's splits, one split after the other, with
    one reader.

    A read that planned no split (an empty directory) still gets one task from Spark, with
    Spark's placeholder ``InputPartition(None)``: it yields nothing, as Spark's own readers
    give an empty DataFrame there."""
    if not isinstance(partition, SplitPartition):
        if partition.value is None:
            return
        raise TypeError(f"expected a sparklink split partition, got {type(partition).__name__}: {partition.value!r}")
    reader = source.create_reader(schema)
    try:
        for split in partition.splits:
            yield from reader.read(split)
    finally:
        reader.close()


def to_spark_limit(limit: ReadLimit) -> spark_limits.ReadLimit:
    if limit.max_rows is not None:
        return ReadMaxRows(limit.max_rows)
    if limit.max_files is not None:
        return ReadMaxFiles(limit.max_files)
    if limit.max_bytes is not None:
        return ReadMaxBytes(limit.max_bytes)
    return ReadAllAvailable()


def from_spark_limit(limit: spark_limits.ReadLimit, default: ReadLimit) -> ReadLimit:
    if isinstance(limit, ReadMaxRows):
        return ReadLimit(max_rows=limit.max_rows)
    if isinstance(limit, ReadMaxFiles):
        return ReadLimit(max_files=limit.max_files)
    if isinstance(limit, ReadMaxBytes):
        return ReadLimit(max_bytes=limit.max_bytes)
    if isinstance(limit, ReadAllAvailable):
        return READ_ALL
    return default  # a composite limit Spark built from our default: honour all of it


class SourceBatchReader(DataSourceReader):
    """``spark.read``: list once on the driver, read every split on the executors."""

    def __init__(self, source: Source, schema: StructType):
        self.source = source
        self.schema = schema

    def partitions(self) -> list[SplitPartition]:
        enumerator = self.source.create_enumerator(streaming=False)
        try:
            start = enumerator.initial_offset()
            end = enumerator.latest_offset(start, READ_ALL)
            return split_partitions(enumerator, start, end)
        finally:
            enumerator.close()

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return read_split(self.source, self.schema, partition)


class SourceStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream``: offsets come from the enumerator; splits go to executors."""

    def __init__(self, source: Source, schema: StructType):
        self.source = source
        self.schema = schema
        self._enumerator: SplitEnumerator | None = None
        self._available_now = False
        self._target: Offset | None = None

    @property
    def enumerator(self) -> SplitEnumerator:
        if self._enumerator is None:
            self._enumerator = self.source.create_enumerator(streaming=True)
        return self._enumerator

    def initialOffset(self) -> Offset:
        return self.enumerator.initial_offset()

    def getDefaultReadLimit(self) -> spark_limits.ReadLimit:
        return to_spark_limit(self.source.default_read_limit())

    def prepareForTriggerAvailableNow(self) -> None:
        self._available_now = True
        self._target = self.enumerator.available_now_offset(None)

    def latestOffset(self, start: Offset, limit: spark_limits.ReadLimit) -> Offset:
        ours = from_spark_limit(limit, self.source.default_read_limit())
        if self._available_now:
            if self._target is None:
                self._target = self.enumerator.available_now_offset(start)
            ours = dataclasses.replace(ours, until=self._target)
        return self.enumerator.latest_offset(start, ours)

    def partitions(self, start: Offset, end: Offset) -> list[SplitPartition]:
        return split_partitions(self.enumerator, start, end)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return read_split(self.source, self.schema, partition)

    def reportLatestOffset(self) -> Offset | None:
        return self.enumerator.report_latest_offset()

    def commit(self, end: Offset) -> None:
        self.enumerator.commit(end)

    def stop(self) -> None:
        if self._enumerator is not None:
            self._enumerator.close()
