"""Options of ``sparklink.kafka`` (driver side, validated when a query starts).

The option names are those of Spark's own Kafka connector, so a query switches by changing the
format name: ``kafka.bootstrap.servers`` and every other ``kafka.*`` option go to the client
(librdkafka property names), ``subscribe`` / ``subscribePattern`` / ``assign`` choose the
partitions, ``startingOffsets`` / ``endingOffsets`` / ``startingTimestamp`` the range,
``maxOffsetsPerTrigger`` the admission control, ``failOnDataLoss`` what deleted offsets do,
``topic`` the sink's target. ``semantic`` (sink) and ``transactionalIdPrefix`` are sparklink's.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sparklink.errors import ConfigError
from sparklink.options import Options, parse_bool, parse_choice, parse_int

CLIENT_PREFIX = "kafka."
OPTION_BOOTSTRAP = "kafka.bootstrap.servers"
OPTION_ISOLATION = "kafka.isolation.level"
OPTION_GROUP_ID = "kafka.group.id"
OPTION_SUBSCRIBE = "subscribe"
OPTION_SUBSCRIBE_PATTERN = "subscribePattern"
OPTION_ASSIGN = "assign"
OPTION_STARTING_OFFSETS = "startingOffsets"
OPTION_ENDING_OFFSETS = "endingOffsets"
OPTION_STARTING_TIMESTAMP = "startingTimestamp"
OPTION_MAX_OFFSETS_PER_TRIGGER = "maxOffsetsPerTrigger"
OPTION_FAIL_ON_DATA_LOSS = "failOnDataLoss"
OPTION_INCLUDE_HEADERS = "includeHeaders"
OPTION_MAX_RECORDS_PER_BATCH = "maxRecordsPerBatch"
OPTION_TOPIC = "topic"
OPTION_SEMANTIC = "semantic"
OPTION_TRANSACTIONAL_ID_PREFIX = "transactionalIdPrefix"

EARLIEST, LATEST, COMMITTED = "earliest", "latest", "committed"
EARLIEST_OFFSET, LATEST_OFFSET = -2, -1  # in JSON offsets, as Spark's Kafka source
SEMANTIC_EXACTLY_ONCE, SEMANTIC_AT_LEAST_ONCE = "exactly-once", "at-least-once"
DEFAULT_MAX_RECORDS_PER_BATCH = 50_000

SOURCE_OPTIONS = (OPTION_SUBSCRIBE, OPTION_SUBSCRIBE_PATTERN, OPTION_ASSIGN, OPTION_STARTING_OFFSETS,
                  OPTION_ENDING_OFFSETS, OPTION_STARTING_TIMESTAMP, OPTION_MAX_OFFSETS_PER_TRIGGER,
                  OPTION_FAIL_ON_DATA_LOSS, OPTION_INCLUDE_HEADERS, OPTION_MAX_RECORDS_PER_BATCH)
SINK_OPTIONS = (OPTION_TOPIC, OPTION_SEMANTIC, OPTION_TRANSACTIONAL_ID_PREFIX)
# Client properties the connector sets itself (Spark's Kafka connector refuses the same ones).
_MANAGED_CLIENT_PROPERTIES = {
    "auto.offset.reset": OPTION_STARTING_OFFSETS,
    "enable.auto.commit": "the offsets in Spark's checkpoint",
    "enable.auto.offset.store": "the offsets in Spark's checkpoint",
    "transactional.id": OPTION_TRANSACTIONAL_ID_PREFIX,
    "enable.idempotence": OPTION_SEMANTIC,
    "key.deserializer": "the binary key column", "value.deserializer": "the binary value column",
    "key.serializer": "the binary key column", "value.serializer": "the binary value column",
}

# A topic-partition: the unit of Kafka offsets.
TopicPartitionKey = tuple[str, int]


def client_config(options: Options) -> dict[str, str]:
    """The librdkafka properties: every ``kafka.*`` option without its prefix."""
    config = {key[len(CLIENT_PREFIX):]: value for key, value in options.items()
              if key.lower().startswith(CLIENT_PREFIX)}
    for prop in config:
        if prop.lower() in _MANAGED_CLIENT_PROPERTIES:
            raise ConfigError(CLIENT_PREFIX + prop, "is set by sparklink",
                              f"use {_MANAGED_CLIENT_PROPERTIES[prop.lower()]}")
    options.require(OPTION_BOOTSTRAP)
    return config


def _parse_json(option: str, text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(option, f"'{text}' is not valid JSON: {exc}") from None


def parse_offsets_json(option: str, text: str) -> dict[TopicPartitionKey, int]:
    """``{"topic": {"0": 23, "1": -2}}`` -> {(topic, 0): 23, (topic, 1): -2}; -2 earliest, -1 latest."""
    data = _parse_json(option, text)
    if not isinstance(data, dict):
        raise ConfigError(option, f"'{text}' must be a JSON object of topic -> {{partition: offset}}")
    result: dict[TopicPartitionKey, int] = {}
    for topic, partitions in data.items():
        if not isinstance(partitions, dict):
            raise ConfigError(option, f"topic '{topic}' must map to an object of partition -> offset")
        for partition, offset in partitions.items():
            if not str(partition).lstrip("-").isdigit() or not isinstance(offset, int) or offset < -2:
                raise ConfigError(option, f"'{topic}' partition '{partition}': offset {offset!r} is not an "
                                          "offset (>= 0, -2 earliest, -1 latest)")
            result[(topic, int(partition))] = offset
    return result


@dataclass(frozen=True, kw_only=True)
class Subscription:
    """Which partitions a source reads: topics by name, by pattern, or an explicit assignment."""

    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assignment: tuple[TopicPartitionKey, ...] = ()

    def matches(self, topic: str) -> bool:
        if self.pattern is not None:
            return re.fullmatch(self.pattern, topic) is not None
        return topic in self.topics

    @classmethod
    def from_options(cls, options: Options) -> "Subscription":
        given = [key for key in (OPTION_SUBSCRIBE, OPTION_SUBSCRIBE_PATTERN, OPTION_ASSIGN) if key in options]
        if len(given) != 1:
            raise ConfigError(" / ".join((OPTION_SUBSCRIBE, OPTION_SUBSCRIBE_PATTERN, OPTION_ASSIGN)),
                              f"exactly one must be given, got {given or 'none'}")
        if OPTION_SUBSCRIBE in options:
            topics = tuple(t.strip() for t in options[OPTION_SUBSCRIBE].split(",") if t.strip())
            if not topics:
                raise ConfigError(OPTION_SUBSCRIBE, "names no topic", "a comma-separated list of topics")
            return cls(topics=topics)
        if OPTION_SUBSCRIBE_PATTERN in options:
            pattern = options[OPTION_SUBSCRIBE_PATTERN]
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ConfigError(OPTION_SUBSCRIBE_PATTERN, f"'{pattern}' is not a regular expression: {exc}") from None
            return cls(pattern=pattern)
        data = _parse_json(OPTION_ASSIGN, options[OPTION_ASSIGN])
        if not isinstance(data, dict) or not all(isinstance(v, list) for v in data.values()):
            raise ConfigError(OPTION_ASSIGN,
                              f"'{options[OPTION_ASSIGN]}' must be a JSON object of topic -> [partitions]")
        assignment = tuple(sorted((topic, int(p)) for topic, parts in data.items() for p in parts))
        if not assignment:
            raise ConfigError(OPTION_ASSIGN, "assigns no partition")
        return cls(topics=tuple(sorted(data)), assignment=assignment)


@dataclass(frozen=True, kw_only=True)
class StartingPosition:
    """Where reading starts: a named position, explicit offsets, a timestamp, or the group's offsets."""

    named: str | None = None  # earliest | latest | committed
    offsets: dict[TopicPartitionKey, int] = field(default_factory=dict)
    timestamp_ms: int | None = None

    @classmethod
    def from_options(cls, options: Options, *, option: str = OPTION_STARTING_OFFSETS) -> "StartingPosition | None":
        """The position the options give; None when they give none (the mode's default applies)."""
        if option == OPTION_STARTING_OFFSETS and OPTION_STARTING_TIMESTAMP in options:
            return cls(timestamp_ms=parse_int(OPTION_STARTING_TIMESTAMP, options[OPTION_STARTING_TIMESTAMP], minimum=0))
        if option not in options:
            return None
        text = options[option].strip()
        if text.startswith("{"):
            return cls(offsets=parse_offsets_json(option, text))
        accepted = (EARLIEST, LATEST, COMMITTED) if option == OPTION_STARTING_OFFSETS else (LATEST,)
        named = parse_choice(option, text, accepted + ("a JSON object of offsets",))
        if named not in accepted:
            raise ConfigError(option, f"unknown value '{text}'", ", ".join(accepted) + ", a JSON object of offsets")
        if named == COMMITTED and OPTION_GROUP_ID not in options:
            raise ConfigError(option, "'committed' needs the consumer group: set kafka.group.id")
        return cls(named=named)


@dataclass(frozen=True, kw_only=True)
class KafkaSourceConfig:
    """Everything the source needs; picklable (travels to executors)."""

    client: dict[str, str]
    subscription: Subscription
    starting: StartingPosition | None  # None: latest for streams, earliest for spark.read (as Spark)
    ending: StartingPosition | None  # spark.read only; None: latest
    max_offsets_per_trigger: int | None
    fail_on_data_loss: bool
    include_headers: bool
    max_records_per_batch: int
    group_id: str | None

    @classmethod
    def from_options(cls, raw: Mapping[str, str] | None) -> "KafkaSourceConfig":
        options = Options(raw)
        client = client_config(options)
        options.reject_unknown(SOURCE_OPTIONS, ignore=[k for k in options if k.lower().startswith(CLIENT_PREFIX)])
        from sparklink.kafka.security import ClientSecurity  # imports this module
        ClientSecurity.from_client(client, committer=False)
        client.setdefault("isolation.level", "read_committed")
        parse_choice(OPTION_ISOLATION, client["isolation.level"], ("read_committed", "read_uncommitted"))
        limit = options.get(OPTION_MAX_OFFSETS_PER_TRIGGER)
        if OPTION_STARTING_TIMESTAMP in options and OPTION_STARTING_OFFSETS in options:
            raise ConfigError(OPTION_STARTING_TIMESTAMP, f"give either it or {OPTION_STARTING_OFFSETS}, not both")
        return cls(
            client=client,
            subscription=Subscription.from_options(options),
            starting=StartingPosition.from_options(options),
            ending=StartingPosition.from_options(options, option=OPTION_ENDING_OFFSETS),
            max_offsets_per_trigger=parse_int(OPTION_MAX_OFFSETS_PER_TRIGGER, limit, minimum=1) if limit else None,
            fail_on_data_loss=parse_bool(OPTION_FAIL_ON_DATA_LOSS, options.get(OPTION_FAIL_ON_DATA_LOSS, "true")),
            include_headers=parse_bool(OPTION_INCLUDE_HEADERS, options.get(OPTION_INCLUDE_HEADERS, "false")),
            max_records_per_batch=parse_int(OPTION_MAX_RECORDS_PER_BATCH,
                                            options.get(OPTION_MAX_RECORDS_PER_BATCH, DEFAULT_MAX_RECORDS_PER_BATCH),
                                            minimum=1),
            group_id=client.get("group.id"),
        )
