"""``sparklink.kafka``: a FLIP-27 Kafka source and a transactional Kafka sink on confluent-kafka.

Option names follow Spark's own Kafka connector; see docs/kafka.md.
"""
