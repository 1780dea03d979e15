"""``sparklink.kafka``: a FLIP-27 Kafka source and a transactional Kafka sink on confluent-kafka.

Option names follow Spark's own Kafka connector; see docs/kafka.md.
"""

from __future__ import annotations

from sparklink.contract import ConnectorSpec, FormatSpec, OptionsDoc

#: The connector contract (ARCHITECTURE.md, "Adding a connector"): read by sparklink.connectors.
CONNECTOR = ConnectorSpec(
    package="kafka",
    formats=(FormatSpec(
        name="sparklink.kafka",
        source="sparklink.kafka.source:KafkaSource",
        source_options=OptionsDoc("sparklink.kafka.config:KafkaSourceOptions", "docs/kafka.md", "kafka-source"),
        sink="sparklink.kafka.sink:KafkaSink",
        sink_options=OptionsDoc("sparklink.kafka.config:KafkaSinkOptions", "docs/kafka.md", "kafka-sink"),
        # also tries the bootstrap servers' TLS / SASL handshake, as a query's start does (an
        # unreachable server is no error: nothing is learnt about the settings)
        sink_check="sparklink.kafka.sink_config:KafkaSinkConfig.from_options",
    ),),
)
