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
from sparklink.kafka.security import CLIENT_PREFIX, ClientSecurity
from sparklink.options import (
    BOOL,
    NON_EMPTY,
    Applies,
    Option,
    Options,
    OptionTable,
    SparkOptions,
    choice,
    integer,
    parse_choice,
    string,
)
from sparklink.sink.changelog import ChangelogOptions
from sparklink.sink.txn import TxnOptions

EARLIEST, LATEST, COMMITTED = "earliest", "latest", "committed"
EARLIEST_OFFSET, LATEST_OFFSET = -2, -1  # in JSON offsets, as Spark's Kafka source
SEMANTIC_EXACTLY_ONCE, SEMANTIC_AT_LEAST_ONCE = "exactly-once", "at-least-once"
_READ_ONLY = Applies("mode", ("read",), "is for spark.read only; a stream has no end", "`spark.read`")


class KafkaClientOptions(OptionTable):
    """The ``kafka.*`` options the connector reads itself; every ``kafka.*`` option goes to the client."""

    passthrough_prefixes = (CLIENT_PREFIX,)
    bootstrap = Option("kafka.bootstrap.servers", string("`host:port,...`"), required=True,
                       doc="the brokers (every other `kafka.*` option goes to the client as a librdkafka property)")


class KafkaSourceOptions(KafkaClientOptions):
    """``sparklink.kafka`` as a source (``spark.read`` and ``spark.readStream``)."""

    subscribe = Option("subscribe", string("topics `a,b`"),
                       doc="the topics to read; exactly one of `subscribe`, `subscribePattern`, `assign`")
    subscribe_pattern = Option("subscribePattern", string("a regular expression"),
                               doc="read the topics the expression matches in full")
    assign = Option("assign", string('JSON `{"topic": [0, 1]}`'), doc="read exactly these partitions")
    starting_offsets = Option("startingOffsets", string('`earliest`, `latest`, `committed`, JSON `{"topic": {"0": 23}}`'),
                              default_doc="`latest` for streams, `earliest` for `spark.read`",
                              doc="where a new query starts: `latest` is refused for `spark.read`; `committed` is "
                                  "the offsets of `kafka.group.id` (a partition without one is an error naming it); "
                                  "in JSON, -2 is earliest and -1 latest, and partitions left out start at the "
                                  "earliest")
    ending_offsets = Option("endingOffsets", string('`latest`, JSON as `startingOffsets`'), applies=_READ_ONLY,
                            default_doc="`latest`", doc="where `spark.read` stops (refused for streams)")
    starting_timestamp = Option("startingTimestamp", integer(0), doc="milliseconds: every partition starts at the "
                                "first record at or after it (as the broker answers a `ListOffsets` by timestamp), at "
                                "the partition's end where no record is that late; not together with "
                                "`startingOffsets`")
    max_offsets_per_trigger = Option("maxOffsetsPerTrigger", integer(1), default_doc="no limit",
                                     doc="at most this many offsets per micro-batch, shared out in proportion to what "
                                         "each partition has waiting (at least one, so the query always moves)")
    fail_on_data_loss = Option("failOnDataLoss", BOOL, default=True,
                               doc="offsets that disappeared before they were read fail the query with a message "
                                   "naming them; `false`: skipped with a warning (see [Data loss](#data-loss-failondataloss))")
    include_headers = Option("includeHeaders", BOOL, default=False, doc="add the `headers` column")
    max_records_per_batch = Option("maxRecordsPerBatch", integer(1), default=50_000,
                                   doc="at most this many messages per `consume` call, which is also the largest "
                                       "Arrow record batch handed to Spark; below it, each call asks for about 8 MiB "
                                       "of records by the sizes seen so far")
    isolation = Option("kafka.isolation.level", choice("read_committed", "read_uncommitted"),
                       default="read_committed", doc="`read_uncommitted` also reads open and aborted transactions")
    group_id = Option("kafka.group.id", string("a consumer group"),
                      doc="the query's offsets are mirrored to this group after every micro-batch, for lag "
                          "monitors, and `startingOffsets=committed` starts there")


class KafkaSinkOptions(KafkaClientOptions, TxnOptions, ChangelogOptions):
    """``sparklink.kafka`` as a sink."""

    topic = Option("topic", NON_EMPTY, default_doc="the `topic` column",
                   doc="the target topic; required unless the data has a `topic` column (the option wins over it)")
    semantic = Option("semantic", choice(SEMANTIC_EXACTLY_ONCE, SEMANTIC_AT_LEAST_ONCE), default=SEMANTIC_EXACTLY_ONCE,
                      doc="`exactly-once`: Kafka transactions committed with the micro-batch")
    transactional_id_prefix = Option("transactionalIdPrefix", string("letters, digits, `.`, `_`, `-`"),
                                     default="sparklink", doc="prefix of the transactional ids and marker groups")
    checkpoint_location = SparkOptions.checkpoint_location.documented(
        "the query's checkpoint; the sink keeps its commit log in `<checkpoint>/sparklink/commits`")


# Client properties the connector sets itself (Spark's Kafka connector refuses the same ones).
_MANAGED_CLIENT_PROPERTIES = {
    "auto.offset.reset": KafkaSourceOptions.starting_offsets.key,
    "enable.auto.commit": "the offsets in Spark's checkpoint",
    "enable.auto.offset.store": "the offsets in Spark's checkpoint",
    "transactional.id": KafkaSinkOptions.transactional_id_prefix.key,
    "enable.idempotence": KafkaSinkOptions.semantic.key,
    "key.deserializer": "the binary key column", "value.deserializer": "the binary value column",
    "key.serializer": "the binary key column", "value.serializer": "the binary value column",
}

O = KafkaSourceOptions
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
    KafkaClientOptions.bootstrap.value(options)
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
        subscribe, pattern_spec, assign = O.subscribe, O.subscribe_pattern, O.assign
        given = [spec.key for spec in (subscribe, pattern_spec, assign) if spec.given(options)]
        if len(given) != 1:
            raise ConfigError(" / ".join((subscribe.key, pattern_spec.key, assign.key)),
                              f"exactly one must be given, got {given or 'none'}")
        if subscribe.given(options):
            topics = tuple(t.strip() for t in subscribe.value(options).split(",") if t.strip())
            if not topics:
                raise ConfigError(subscribe.key, "names no topic", "a comma-separated list of topics")
            return cls(topics=topics)
        if pattern_spec.given(options):
            pattern = pattern_spec.value(options)
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ConfigError(pattern_spec.key, f"'{pattern}' is not a regular expression: {exc}") from None
            return cls(pattern=pattern)
        assigned = assign.value(options)
        data = _parse_json(assign.key, assigned)
        if not isinstance(data, dict) or not all(isinstance(v, list) for v in data.values()):
            raise ConfigError(assign.key, f"'{assigned}' must be a JSON object of topic -> [partitions]")
        assignment = tuple(sorted((topic, int(p)) for topic, parts in data.items() for p in parts))
        if not assignment:
            raise ConfigError(assign.key, "assigns no partition")
        return cls(topics=tuple(sorted(data)), assignment=assignment)


@dataclass(frozen=True, kw_only=True)
class StartingPosition:
    """Where reading starts: a named position, explicit offsets, a timestamp, or the group's offsets."""

    named: str | None = None  # earliest | latest | committed
    offsets: dict[TopicPartitionKey, int] = field(default_factory=dict)
    timestamp_ms: int | None = None

    @classmethod
    def from_options(cls, options: Options, *, ending: bool = False) -> "StartingPosition | None":
        """The position the options give (``ending``: the end of a ``spark.read``); None when they
        give none (the mode's default applies)."""
        spec = O.ending_offsets if ending else O.starting_offsets
        option = spec.key
        if not ending and O.starting_timestamp.given(options):
            return cls(timestamp_ms=O.starting_timestamp.value(options))
        given = spec.get(options)
        if given is None:
            return None
        text = given.strip()
        if text.startswith("{"):
            return cls(offsets=parse_offsets_json(option, text))
        accepted = (LATEST,) if ending else (EARLIEST, LATEST, COMMITTED)
        named = parse_choice(option, text, accepted + ("a JSON object of offsets",))
        if named not in accepted:
            raise ConfigError(option, f"unknown value '{text}'", ", ".join(accepted) + ", a JSON object of offsets")
        if named == COMMITTED and not O.group_id.given(options):
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
        O.options(options)
        ClientSecurity.from_client(client, committer=False)
        client.setdefault("isolation.level", O.isolation.value(options))  # a given one is checked by value()
        limit = options.get(O.max_offsets_per_trigger.key)
        if O.starting_timestamp.given(options) and O.starting_offsets.given(options):
            raise ConfigError(O.starting_timestamp.key, f"give either it or {O.starting_offsets.key}, not both")
        return cls(
            client=client,
            subscription=Subscription.from_options(options),
            starting=StartingPosition.from_options(options),
            ending=StartingPosition.from_options(options, ending=True),
            max_offsets_per_trigger=O.max_offsets_per_trigger.parse(limit) if limit else None,
            fail_on_data_loss=O.fail_on_data_loss.value(options),
            include_headers=O.include_headers.value(options),
            max_records_per_batch=O.max_records_per_batch.value(options),
            group_id=client.get("group.id"),
        )
