"""``sparklink.kafka`` as a source: Flink's KafkaSource on the sparklink SDK (driver side).

Built from the options on the driver, pickled to executors, where it creates readers.
"""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.sql.types import StructType

from sparklink.kafka.config import KafkaSourceConfig
from sparklink.kafka.enumerator import KafkaSplitEnumerator
from sparklink.kafka.reader import KafkaSourceReader
from sparklink.kafka.records import source_schema
from sparklink.source import READ_ALL, ReadLimit, Source


class KafkaSource(Source):
    def __init__(self, options: Mapping[str, str] | None = None):
        super().__init__(options)
        self.config = KafkaSourceConfig.from_options(options)

    def schema(self) -> StructType:
        return source_schema(self.config.include_headers)

    def create_enumerator(self, *, streaming: bool) -> KafkaSplitEnumerator:
        return KafkaSplitEnumerator(self.config, streaming=streaming)

    def create_reader(self, schema: StructType) -> KafkaSourceReader:
        return KafkaSourceReader(self.config, schema)

    def default_read_limit(self) -> ReadLimit:
        if self.config.max_offsets_per_trigger is None:
            return READ_ALL
        return ReadLimit(max_rows=self.config.max_offsets_per_trigger)
