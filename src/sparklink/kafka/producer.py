"""A producer that sends Arrow record batches and knows its transactional session (executor side).

:class:`RecordProducer` turns the sink's input columns into ``produce`` calls (column-wise
extraction, one call per record, which is the client's granularity), tracks the offsets the
brokers assigned per partition and the first delivery error. With a transactional id it also
learns its session, (producer id, epoch), which the driver needs to commit the transaction
later: librdkafka logs it when ``InitProducerId`` returns (debug context ``eos``), and no API
exposes it, so the producer reads its own log line.
"""

from __future__ import annotations

import itertools
import logging
import re
from typing import Any

import pyarrow as pa
from confluent_kafka import KafkaException, Producer

from sparklink.kafka.metadata import REQUEST_TIMEOUT_SECONDS, KafkaError
from sparklink.kafka.sink_config import KafkaSinkConfig

_PID_LINE = re.compile(r"Acquired PID\{Id:(\d+),Epoch:(\d+)\}")
_QUEUE_FULL_WAIT_SECONDS = 0.1


class _SessionLog(logging.Handler):
    """Collects the client's ``Acquired PID{Id:..,Epoch:..}`` lines (nothing else is kept)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.sessions: list[tuple[int, int]] = []

    def emit(self, record: logging.LogRecord) -> None:
        match = _PID_LINE.search(record.getMessage())
        if match:
            self.sessions.append((int(match.group(1)), int(match.group(2))))


class Deliveries:
    """Offsets per partition and the first error, filled by the client's delivery reports (one
    call per record, on the task's thread inside ``poll`` / ``flush``: kept to a few operations)."""

    def __init__(self) -> None:
        self.bounds: dict[tuple[str, int], list[int]] = {}
        self.count = 0
        self.error: str | None = None

    def __call__(self, error, message) -> None:
        if error is not None:
            if self.error is None:
                self.error = f"{message.topic()}-{message.partition()}: {error}"
            return
        self.count += 1
        offset = message.offset()
        bounds = self.bounds.get((message.topic(), message.partition()))
        if bounds is None:
            self.bounds[(message.topic(), message.partition())] = [offset, offset]
        elif offset > bounds[1]:  # the idempotent producer reports a partition's records in order
            bounds[1] = offset
        elif offset < bounds[0]:
            bounds[0] = offset

    @property
    def ranges(self) -> dict[str, list[int]]:
        """``{"topic-partition": [first offset, last offset]}`` of the records written."""
        return {f"{topic}-{partition}": list(bounds) for (topic, partition), bounds in self.bounds.items()}


class RecordProducer:
    """One producer per write task. ``transactional_id`` None: the idempotent producer."""

    def __init__(self, config: KafkaSinkConfig, transactional_id: str | None):
        self.config = config
        self.transactional_id = transactional_id
        self.deliveries = Deliveries()
        settings: dict[str, Any] = dict(config.client)  # librdkafka's settings: strings, and a logger below
        settings["enable.idempotence"] = "true"
        self._session_log: _SessionLog | None = None
        if transactional_id is not None:
            settings["transactional.id"] = transactional_id
            self._session_log = _SessionLog()
            logger = logging.getLogger(f"sparklink.kafka.session.{transactional_id}")
            logger.propagate = False
            logger.setLevel(logging.DEBUG)
            logger.handlers = [self._session_log]
            settings["debug"] = ",".join(filter(None, [settings.get("debug"), "eos"]))
            settings["logger"] = logger
        self.producer = Producer(settings)
        self.session: tuple[int, int] | None = None

    def init_transactions(self) -> tuple[int, int]:
        """Fence older sessions of the id (aborting what they left open) and return this
        session's (producer id, epoch)."""
        try:
            self.producer.init_transactions(REQUEST_TIMEOUT_SECONDS)
        except KafkaException as exc:
            raise KafkaError(f"initialising transactional id '{self.transactional_id}': {exc}") from None
        self.producer.poll(0)  # serves the log queue
        assert self._session_log is not None
        if not self._session_log.sessions:
            raise KafkaError(f"transactional id '{self.transactional_id}': the client did not report its producer "
                             "id and epoch (librdkafka debug context 'eos'); cannot hand the transaction to the driver")
        self.session = self._session_log.sessions[-1]
        return self.session

    def begin(self) -> None:
        self.producer.begin_transaction()

    def send(self, batch: pa.RecordBatch) -> None:
        """Produce every row of ``batch``: each column is taken out of Arrow once, then one
        positional ``produce`` call per record (the client's granularity, no per-record dict).
        The client's positional order: topic, value, key, partition, callback, on_delivery (an
        alias), timestamp, headers."""
        config = self.config
        names = batch.schema.names
        count = batch.num_rows

        def column(name: str, present: bool) -> list | itertools.repeat:
            return batch.column(names.index(name)).to_pylist() if present else itertools.repeat(None, count)

        values, keys = column("value", True), column("key", config.has_key)
        topics = itertools.repeat(config.topic, count) if config.topic is not None else column("topic", True)
        partitions, headers = column("partition", config.has_partition), column("headers", config.has_headers)
        produce, on_delivery = self.producer.produce, self.deliveries
        if config.topic is not None and not config.has_partition and not config.has_headers:  # the usual case
            topic = config.topic
            for value, key in zip(values, keys, strict=False):
                try:
                    produce(topic, value, key, -1, on_delivery)
                except BufferError:
                    self._produce_when_room(topic, value, key, -1, on_delivery, None)
            return
        for topic, value, key, partition, header in zip(topics, values, keys, partitions, headers, strict=False):
            if topic is None:
                raise KafkaError("a row has a null 'topic' and the sink has no 'topic' option")
            pairs = [(h["key"], h["value"]) for h in header] if header else None
            partition = -1 if partition is None else partition
            try:
                produce(topic, value, key, partition, on_delivery, None, 0, pairs)
            except BufferError:
                self._produce_when_room(topic, value, key, partition, on_delivery, pairs)

    def _produce_when_room(self, topic, value, key, partition: int, on_delivery, headers) -> None:
        """The client's queue is full: let it send until the record fits."""
        while True:
            self.producer.poll(_QUEUE_FULL_WAIT_SECONDS)
            try:
                self.producer.produce(topic, value, key, partition, on_delivery, None, 0, headers)
                return
            except BufferError:
                continue

    def flush(self) -> None:
        """Wait until every record is acknowledged; raise on the first delivery error."""
        left = self.producer.flush(REQUEST_TIMEOUT_SECONDS * 4)
        if left:
            raise KafkaError(f"{left} records were not acknowledged within {REQUEST_TIMEOUT_SECONDS * 4:.0f}s")
        if self.deliveries.error is not None:
            raise KafkaError(f"a record could not be written: {self.deliveries.error}")

    def abort(self) -> None:
        try:
            self.producer.abort_transaction(REQUEST_TIMEOUT_SECONDS)
        except KafkaException as exc:
            raise KafkaError(f"aborting the transaction of '{self.transactional_id}': {exc}") from None
