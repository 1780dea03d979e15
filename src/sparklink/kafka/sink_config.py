"""Options of the ``sparklink.kafka`` sink (driver side, validated when the query starts).

Input columns are those of Spark's Kafka sink: ``value`` (binary or string, required), ``key``
(binary or string), ``topic`` (string; the ``topic`` option wins when both are given),
``partition`` (int; absent or null: the client's partitioner) and ``headers``
(array<struct<key string, value binary>>).

With ``writeMode=upsert`` (:mod:`sparklink.sink.changelog`) the record key is built from
``keyColumns`` (:func:`sparklink.kafka.records.encode_keys`; the data then has no ``key``
column), each task's changes are reduced to the last per key, and a delete is a tombstone
(null value): the records a compacted topic keeps.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pyspark.sql.types import ArrayType, BinaryType, DataType, IntegerType, StringType, StructType

from sparklink.errors import ConfigError
from sparklink.kafka.config import SEMANTIC_EXACTLY_ONCE, KafkaSinkOptions, client_config
from sparklink.kafka.security import ClientSecurity, check_connection
from sparklink.options import Options
from sparklink.sink.changelog import Changelog

O = KafkaSinkOptions
_STRING_OR_BINARY = (StringType, BinaryType)


def _check_column(schema: StructType, name: str, allowed: tuple[type[DataType], ...], *, required: bool) -> bool:
    if name not in schema.names:
        if required:
            raise ConfigError("schema", f"the Kafka sink needs a '{name}' column; the data has {schema.names}")
        return False
    data_type = schema[name].dataType
    if not isinstance(data_type, allowed):
        raise ConfigError("schema", f"column '{name}' is {data_type.simpleString()}; the Kafka sink accepts "
                                    f"{' or '.join(t.typeName() for t in allowed)}")
    return True


@dataclass(frozen=True, kw_only=True)
class KafkaSinkConfig:
    """The sink's settings; picklable (travels to executors)."""

    client: dict[str, str]
    topic: str | None
    semantic: str
    transactional_id_prefix: str
    has_key: bool
    has_topic_column: bool
    has_partition: bool
    has_headers: bool
    changelog: Changelog | None = None  # writeMode=upsert: key from keyColumns, deletes as tombstones

    @property
    def exactly_once(self) -> bool:
        return self.semantic == SEMANTIC_EXACTLY_ONCE

    @classmethod
    def from_options(cls, raw: Mapping[str, str] | None, schema: StructType) -> "KafkaSinkConfig":
        options = Options(raw)
        client = client_config(options)
        O.options(options)
        semantic = O.semantic.value(options)
        # the committer (exactly-once) must honour every security setting the writers use
        ClientSecurity.from_client(client, committer=semantic == SEMANTIC_EXACTLY_ONCE)
        prefix = O.transactional_id_prefix.value(options)
        if not prefix or not all(c.isalnum() or c in "._-" for c in prefix):
            raise ConfigError(O.transactional_id_prefix.key, f"'{prefix}' must be letters, digits, '.', '_' or '-'")
        _check_column(schema, "value", _STRING_OR_BINARY, required=True)
        has_topic_column = _check_column(schema, "topic", (StringType,), required=False)
        topic = options.get(O.topic.key)
        if topic is None and not has_topic_column:
            raise ConfigError(O.topic.key, "is required when the data has no 'topic' column")
        has_headers = _check_column(schema, "headers", (ArrayType,), required=False)
        changelog = Changelog.from_options(options)
        has_key = _check_column(schema, "key", _STRING_OR_BINARY, required=False)
        if changelog is not None:
            changelog.check_columns(schema.names)
            if has_key:
                raise ConfigError(O.key_columns.key, "builds the record key, and the data also has a 'key' column",
                                  "drop the 'key' column, or write with writeMode=append")
            has_key = True
        check_connection(client)  # a wrong CA, password or protocol: a one-line error now, not a hang later
        return cls(client=client, topic=topic, semantic=semantic, transactional_id_prefix=prefix,
                   has_key=has_key, has_topic_column=has_topic_column,
                   has_partition=_check_column(schema, "partition", (IntegerType,), required=False),
                   has_headers=has_headers, changelog=changelog)

    @property
    def sends_changes_as_they_come(self) -> bool:
        """``writeMode=upsert`` without ``sequenceColumn``, into the ``topic`` option's topic,
        partitioned by key: each batch Spark hands a task is reduced to its last change per key and
        sent at once, while the next batch is handed over. A key changed in two batches of a task
        gets two records, in order, in the key's partition, so the compacted topic (and a consumer
        applying records in order) ends at the task's last change, as with the whole task reduced.
        With a ``sequenceColumn`` the last change is the greatest value, which can come first, and
        with a ``topic`` or ``partition`` column two changes of a key can land in different
        partitions: then the task keeps its rows and sends one record per key at its end."""
        return (self.changelog is not None and self.changelog.sequence_column is None
                and not self.has_topic_column and not self.has_partition)

    @property
    def passed_columns(self) -> list[str]:
        """The input columns a record carries besides key and value."""
        return [name for name, present in (("topic", self.has_topic_column), ("partition", self.has_partition),
                                           ("headers", self.has_headers)) if present]

    def transactional_id(self, owner: str, partition: int) -> str:
        """One id per (query, Spark partition): every attempt and every replay of that partition
        uses it, so a new writer fences (aborts) whatever an older one left open."""
        return f"{self.transactional_id_prefix}-{owner}-{partition}"

    def marker_group(self, owner: str, partition: int) -> str:
        """The consumer group whose offset is the (query, partition)'s batch marker."""
        return f"{self.transactional_id_prefix}-{owner}-{partition}-marker"

    def registry_group(self, owner: str, partition: int) -> str:
        """The consumer group whose existence records that transactional id (owner, partition) was used."""
        return f"{self.transactional_id_prefix}-{owner}-{partition}-writer"

    def registry_prefix(self, owner: str) -> str:
        return f"{self.transactional_id_prefix}-{owner}-"
