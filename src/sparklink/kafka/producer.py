"""A producer that sends Arrow record batches and knows its transactional session (executor side).

:class:`RecordProducer` turns the sink's input columns into ``produce`` calls (column-wise
extraction, one call per record, which is the client's granularity), tracks the offsets the
brokers assigned per partition and the first delivery error. With a transactional id it also
learns its session, (producer id, epoch), which the driver needs to commit the transaction
later: librdkafka logs it when ``InitProducerId`` returns (debug context ``eos``), and no API
exposes it, so the producer reads its own log line.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field

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


@dataclass
class Deliveries:
    """Offsets per partition and the first error, filled by delivery reports."""

    ranges: dict[str, list[int]] = field(default_factory=dict)
    count: int = 0
    error: str | None = None

    def __call__(self, error, message) -> None:
        if error is not None:
            if self.error is None:
                self.error = f"{message.topic()}-{message.partition()}: {error}"
            return
        self.count += 1
        key = f"{message.topic()}-{message.partition()}"
        offset = message.offset()
        bounds = self.ranges.get(key)
        if bounds is None:
            self.ranges[key] = [offset, offset]
        elif offset > bounds[1]:
            bounds[1] = offset
        elif offset < bounds[0]:
            bounds[0] = offset


class RecordProducer:
    """One producer per write task. ``transactional_id`` None: the idempotent producer."""

    def __init__(self, config: KafkaSinkConfig, transactional_id: str | None):
        self.config = config
        self.transactional_id = transactional_id
        self.deliveries = Deliveries()
        settings = dict(config.client)
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
        """Produce every row of ``batch`` (values column-wise, one client call per record)."""
        config = self.config
        names = batch.schema.names
        values = batch.column(names.index("value")).to_pylist()
        count = len(values)
        keys = batch.column(names.index("key")).to_pylist() if config.has_key else [None] * count
        if config.topic is not None:
            topics = [config.topic] * count
        else:
            topics = batch.column(names.index("topic")).to_pylist()
        partitions = batch.column(names.index("partition")).to_pylist() if config.has_partition else [None] * count
        headers = batch.column(names.index("headers")).to_pylist() if config.has_headers else [None] * count
        produce, on_delivery = self.producer.produce, self.deliveries
        for topic, value, key, partition, header in zip(topics, values, keys, partitions, headers):
            if topic is None:
                raise KafkaError("a row has a null 'topic' and the sink has no 'topic' option")
            kwargs = {"key": key, "on_delivery": on_delivery}
            if partition is not None:
                kwargs["partition"] = partition
            if header:
                kwargs["headers"] = [(h["key"], h["value"]) for h in header]
            while True:
                try:
                    produce(topic, value, **kwargs)
                    break
                except BufferError:  # the client's queue is full: let it send
                    self.producer.poll(_QUEUE_FULL_WAIT_SECONDS)

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
