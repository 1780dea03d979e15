"""The Kafka split enumerator (Flink's KafkaSourceEnumerator), run on the driver.

The offset Spark logs for each micro-batch is Spark's Kafka offset JSON,
``{"topic": {"partition": next offset}}``. Every trigger the enumerator lists the partitions the
subscription covers (so partitions and topics created while the query runs are found; they are
read from their earliest offset, as in Spark), asks for their end offsets (the last stable
offset under read_committed) and admits at most ``maxOffsetsPerTrigger`` offsets, shared out in
proportion to what each partition has waiting. A split is one partition's range.
"""

from __future__ import annotations

import logging

from confluent_kafka import IsolationLevel

from sparklink.errors import ConfigError, DataError
from sparklink.kafka.config import (
    COMMITTED,
    EARLIEST,
    EARLIEST_OFFSET,
    LATEST,
    LATEST_OFFSET,
    OPTION_ASSIGN,
    OPTION_ENDING_OFFSETS,
    OPTION_STARTING_OFFSETS,
    KafkaSourceConfig,
    StartingPosition,
    TopicPartitionKey,
)
from sparklink.kafka.metadata import KafkaError, KafkaMetadata
from sparklink.kafka.reader import split_for
from sparklink.kafka.security import check_connection
from sparklink.source import Offset, ReadLimit, Split, SplitEnumerator

LOG = logging.getLogger(__name__)
Positions = dict[TopicPartitionKey, int]


def encode(positions: Positions) -> Offset:
    """Positions as Spark's Kafka offset JSON (string partition keys, sorted)."""
    result: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(positions.items()):
        result.setdefault(topic, {})[str(partition)] = offset
    return result


def decode(offset: Offset | None) -> Positions:
    return {(topic, int(partition)): int(value) for topic, parts in (offset or {}).items()
            for partition, value in parts.items()}


def offsets_for_timestamp(found: Positions, ends: Positions) -> Positions:
    """Where a ``startingTimestamp`` query starts: the broker's answer for each partition (the
    first offset at or after the timestamp), or the partition's end where it answered -1 (no
    record that late: the query reads what arrives from now on, Spark's
    ``startingOffsetsByTimestampStrategy=latest``)."""
    return {tp: found[tp] if found[tp] >= 0 else ends[tp] for tp in ends}


def share_out(waiting: dict[TopicPartitionKey, int], budget: int) -> dict[TopicPartitionKey, int]:
    """How many offsets each partition may advance when ``budget`` is less than all that is
    waiting: in proportion to what waits, rounded down, the rest one by one in partition order;
    at least one offset overall so that the query always progresses."""
    total = sum(waiting.values())
    if total <= budget:
        return dict(waiting)
    shares = {tp: waiting[tp] * budget // total for tp in waiting}
    left = max(budget, 1) - sum(shares.values())
    for tp in sorted(waiting):
        if left <= 0:
            break
        if shares[tp] < waiting[tp]:
            shares[tp] += 1
            left -= 1
    return shares


class KafkaSplitEnumerator(SplitEnumerator):
    """Driver side: one per query run (streams) or per ``spark.read``."""

    def __init__(self, config: KafkaSourceConfig, *, streaming: bool):
        if streaming and config.ending is not None:
            raise ConfigError(OPTION_ENDING_OFFSETS, "is for spark.read only; a stream has no end")
        if not streaming and config.starting is not None and config.starting.named == LATEST:
            raise ConfigError(OPTION_STARTING_OFFSETS, "'latest' is not allowed for spark.read (it would read nothing)",
                              "earliest, committed, a JSON object of offsets, startingTimestamp")
        self.config = config
        self.streaming = streaming
        check_connection(config.client)  # a wrong CA, password or protocol: a one-line error now, not a hang
        self.metadata = KafkaMetadata(config.client)

    # ------------------------------------------------------------------ positions

    def _resolve(self, position: StartingPosition, partitions: list[TopicPartitionKey], option: str) -> Positions:
        """Turn a configured position into offsets for ``partitions`` (one request per kind)."""
        if position.timestamp_ms is not None:
            return offsets_for_timestamp(self.metadata.for_timestamp(partitions, position.timestamp_ms),
                                         self.metadata.latest(partitions))
        if position.named == COMMITTED:
            assert self.config.group_id is not None  # StartingPosition refuses 'committed' without kafka.group.id
            found = self.metadata.committed(self.config.group_id, partitions)
            missing = [f"{t}-{p}" for t, p in partitions if (t, p) not in found]
            if missing:
                raise ConfigError(option, f"consumer group '{self.config.group_id}' has no committed offset for "
                                          f"{', '.join(missing)}", "earliest, latest, a JSON object of offsets")
            return found
        if position.named == EARLIEST:
            return self.metadata.earliest(partitions)
        if position.named == LATEST:
            return self.metadata.latest(partitions)
        unknown = sorted(set(position.offsets) - set(partitions))
        if unknown:
            raise ConfigError(option, f"names partitions the subscription does not have: "
                                      f"{', '.join(f'{t}-{p}' for t, p in unknown)}")
        earliest = self.metadata.earliest(partitions)  # partitions the JSON leaves out start at the earliest
        latest = self.metadata.latest(partitions)
        resolved = {}
        for tp in partitions:
            wanted = position.offsets.get(tp, EARLIEST_OFFSET)
            named = {EARLIEST_OFFSET: earliest[tp], LATEST_OFFSET: latest[tp]}
            resolved[tp] = named.get(wanted, wanted)
        return resolved

    def _partitions(self) -> list[TopicPartitionKey]:
        partitions = self.metadata.partitions(self.config.subscription)
        wanted = self.config.subscription.assignment
        if wanted and len(partitions) != len(wanted):
            missing = sorted(set(wanted) - set(partitions))
            raise ConfigError(OPTION_ASSIGN, f"partitions {', '.join(f'{t}-{p}' for t, p in missing)} do not exist")
        return partitions

    def initial_offset(self) -> Offset:
        default = StartingPosition(named=LATEST if self.streaming else EARLIEST)
        return encode(self._resolve(self.config.starting or default, self._partitions(), OPTION_STARTING_OFFSETS))

    # ------------------------------------------------------------------ per trigger

    def latest_offset(self, start: Offset, limit: ReadLimit) -> Offset:
        current = decode(start)
        partitions = self._partitions()
        gone = sorted(set(current) - set(partitions))
        if gone:
            message = ("partitions " + ", ".join(f"{t}-{p} (at offset {current[(t, p)]})" for t, p in gone)
                       + " were deleted while the query read them")
            if self.config.fail_on_data_loss:
                raise DataError(f"{message}; set failOnDataLoss=false to go on without them")
            LOG.warning("%s; going on without them (failOnDataLoss=false)", message)
        if not self.streaming:
            ends = self._resolve(self.config.ending or StartingPosition(named=LATEST), partitions,
                                 OPTION_ENDING_OFFSETS)
        else:
            ends = self.metadata.latest(partitions)
        went_back = self._offsets_went_back(current, ends) if self.streaming else []
        new = [tp for tp in partitions if tp not in current or tp in went_back]
        starts = {tp: current[tp] for tp in partitions if tp not in new}
        starts.update(self.metadata.earliest(new))
        until = decode(limit.until) if limit.until is not None else None
        end: Positions = {}
        for tp in partitions:
            reachable = max(ends[tp], starts[tp])  # never behind where the query already is
            if until is not None:
                reachable = min(reachable, max(until.get(tp, starts[tp]), starts[tp]))
            end[tp] = reachable
        if limit.max_rows is not None:
            shares = share_out({tp: end[tp] - starts[tp] for tp in partitions}, limit.max_rows)
            end = {tp: starts[tp] + shares[tp] for tp in partitions}
        for tp in gone:  # failOnDataLoss=false: keep the last position, so the offset never goes back
            end[tp] = current[tp]
        return encode(end)

    def _offsets_went_back(self, current: Positions, ends: Positions) -> list[TopicPartitionKey]:
        """Partitions whose end is now below the query's position: the topic was deleted and
        re-created. Judged on the high watermark: under read_committed the end is the last stable
        offset, which an open transaction holds back (on Tansu down to 0), and that is no loss.
        ``failOnDataLoss`` true: an error naming them; false: they are read again from their
        earliest offset (the re-created topic's records), with a warning."""
        behind = [tp for tp in ends if tp in current and ends[tp] < current[tp]]
        if behind and self.metadata.isolation == IsolationLevel.READ_COMMITTED:
            highs = self.metadata.high_watermarks(behind)
            behind = [tp for tp in behind if highs[tp] < current[tp]]
        if not behind:
            return []
        message = ("the offsets of " + ", ".join(f"{t}-{p} went back from {current[(t, p)]} to {ends[(t, p)]}"
                                                 for t, p in behind)
                   + " (the topic was deleted and re-created): records may have been missed")
        if self.config.fail_on_data_loss:
            raise DataError(f"{message}; set failOnDataLoss=false to read them again from their earliest offset")
        LOG.warning("%s; reading them again from their earliest offset (failOnDataLoss=false)", message)
        return behind

    def plan_splits(self, start: Offset, end: Offset) -> list[Split]:
        """One split per partition with offsets in the range; a partition the start does not
        know yet (new), or whose end is below the start (re-created, ``failOnDataLoss=false``),
        is read from its earliest offset."""
        begin = decode(start)
        splits = []
        for (topic, partition), until in sorted(decode(end).items()):
            first = begin.get((topic, partition), EARLIEST_OFFSET)
            if until < first:
                first = EARLIEST_OFFSET
            if first == EARLIEST_OFFSET or until > first:
                splits.append(split_for(topic, partition, first, until))
        return splits

    def supported_limits(self) -> frozenset[str]:
        return frozenset({"max_rows"})

    def commit(self, end: Offset) -> None:
        """Driver side, after each batch: mirror the position to ``kafka.group.id`` for lag
        monitors (the query's position stays the offset in Spark's checkpoint)."""
        if self.config.group_id is None:
            return
        try:
            self.metadata.mirror_to_group(self.config.group_id, decode(end))
        except KafkaError as exc:  # monitoring only: the query's progress is in the checkpoint
            LOG.warning("could not mirror offsets to consumer group %s: %s", self.config.group_id, exc)
