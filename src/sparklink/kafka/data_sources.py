"""Registration of the ``sparklink.kafka`` format (source and sink)."""

from __future__ import annotations


def data_sources() -> list[type]:
    from sparklink.kafka.sink import KafkaSink
    from sparklink.kafka.source import KafkaSource
    from sparklink.spark import as_data_source

    return [as_data_source(KafkaSource, "sparklink.kafka", sink=KafkaSink)]
