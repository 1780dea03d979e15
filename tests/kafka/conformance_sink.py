"""The Kafka sink as the conformance suite writes it (test side).

The suite's jobs write the sequence source's rows (``id``, ``split``); a Kafka sink writes
``key`` / ``value`` records. :class:`IdsKafkaSink` is the Kafka sink with one step in front of
it on the executors: each row becomes the record (key = value = the id as text). Everything
else, the transactions, markers, commits and recovery, is the real sink's.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.types import StringType, StructField, StructType

from sparklink.kafka.sink import KafkaSink, KafkaWriter
from sparklink.spark import as_data_source

RECORD_SCHEMA = StructType([StructField("key", StringType()), StructField("value", StringType())])


class IdsKafkaWriter(KafkaWriter):
    def write_batch(self, batch: pa.RecordBatch) -> None:
        text = pc.cast(batch.column(batch.schema.names.index("id")), pa.string())
        super().write_batch(pa.RecordBatch.from_arrays([text, text], names=["key", "value"]))


class IdsKafkaSink(KafkaSink):
    def __init__(self, options, schema):
        super().__init__(options, RECORD_SCHEMA)

    def create_writer(self, context) -> IdsKafkaWriter:
        return IdsKafkaWriter(self.config, context)


IdsKafkaDataSource = as_data_source(None, "sparklink-test.kafka-ids", sink=IdsKafkaSink)
