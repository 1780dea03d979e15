"""``sparklink.kafka`` as a sink: Flink's KafkaSink (two-phase commit) on the sparklink SDK.

``semantic=exactly-once`` (the default), per micro-batch:

1. *Writer (executor, one per task)*: a producer with transactional id
   ``<prefix>-<queryId>-<partition>`` initialises its session, which fences every older
   session of the id (a failed attempt, a replay, a zombie) and aborts what it left open. It
   begins a transaction, produces the task's rows, flushes, and adds the batch marker (the
   consumer-group offset ``batchId + 1``, see :mod:`sparklink.kafka.markers`) to the same
   transaction. It does NOT commit: the transaction stays open (prepared) and the task returns
   the committable (transactional id, producer id, epoch, batch, partition, offsets written).
2. *Driver, Spark's commit decision*: the SDK logs the committables durably in the checkpoint
   (``sink.after_log``), then the committer ends each transaction with ``EndTxn(commit)`` for
   the writer's session (:mod:`sparklink.kafka.transaction_coordinator`). A repeat of an ended
   commit succeeds; if the coordinator refuses (session fenced), the batch marker decides:
   committed -> already committed; not committed -> the records are lost (the transaction
   was aborted outside sparklink or timed out): CommitError.
3. *Recovery*: whenever the sink is built on the driver (before a batch's tasks run), logged
   but unfinished commits are rolled forward, so a replay's writers, which fence the same ids,
   never abort a transaction Spark decided to commit. A replay of a batch the log already has
   is discarded (``EndTxn(abort)``). After each commit, ids of partitions the batch did not
   use but a crashed run did (the writer registry) are fenced, so no transaction stays open.

With ``writeMode=upsert`` the key comes from ``keyColumns`` and a delete is a tombstone
(records.py). Without ``sequenceColumn`` (one topic, partitioned by key) each batch Spark hands
over is reduced to its last change per key and sent as it comes, as plain rows are; otherwise a
task keeps its rows and, before it flushes, sends one record per key, the last change
(:attr:`KafkaSinkConfig.sends_changes_as_they_come`). A key's changes must be in one task of a
micro-batch either way.

``semantic=at-least-once``: the idempotent producer; each task flushes before it reports
success; a replayed batch is written again.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping

import pyarrow as pa
from confluent_kafka import KafkaException, Producer, TopicPartition
from pyspark.sql.types import StructType

from sparklink.errors import CommitError
from sparklink.faults import fault_point
from sparklink.kafka.markers import group_metadata, marker_offset, register_writer, registered_groups
from sparklink.kafka.metadata import REQUEST_TIMEOUT_SECONDS, KafkaError
from sparklink.kafka.producer import RecordProducer
from sparklink.kafka.records import changelog_records
from sparklink.kafka.sink_config import KafkaSinkConfig
from sparklink.kafka.transaction_coordinator import CoordinatorUnreachable, end_transaction
from sparklink.sink import CommitRequest, Committable, Committer, Sink, SinkWriter, WriterContext
from sparklink.sink.protocol import MAX_COMMIT_ATTEMPTS

LOG = logging.getLogger(__name__)
COMMITTABLE_VERSION = 1


def _owner(context: WriterContext) -> str:
    """Whose transactional ids: the streaming query (stable across restarts) or the batch job."""
    return context.query_id if context.query_id else f"job-{context.job_id[:16]}"


class KafkaWriter(SinkWriter):
    """Executor side: one producer (and, exactly-once, one prepared transaction) per task."""

    def __init__(self, config: KafkaSinkConfig, context: WriterContext):
        self.config = config
        self.context = context
        self.owner = _owner(context)
        self.producer: RecordProducer | None = None
        self.in_transaction = False
        self.first_topic: str | None = None
        # writeMode=upsert reduced over the whole task: its batches are kept until prepare_commit
        self.changes: list[pa.RecordBatch] | None = (
            [] if config.changelog is not None and not config.sends_changes_as_they_come else None)
        # the producer's session is opened at once, beside the task's first rows: the client's
        # first producer-id request often waits 0.5 s for a broker connection (librdkafka's retry
        # timer), which then overlaps Spark handing the rows over (every task opens it anyway:
        # an empty task still fences its id)
        self._opened: RecordProducer | None = None
        self._open_error: BaseException | None = None
        self._opening = threading.Thread(target=self._open_session, name=f"sparklink-kafka-open-{context.partition_id}",
                                         daemon=True)
        self._opening.start()

    def _open_session(self) -> None:
        """On the opening thread: a producer, with its transactional session when exactly-once."""
        try:
            if self.config.exactly_once:
                producer = RecordProducer(self.config, self.config.transactional_id(self.owner,
                                                                                     self.context.partition_id))
                producer.init_transactions()
            else:
                producer = RecordProducer(self.config, None)
            self._opened = producer
        except BaseException as exc:  # noqa: BLE001 - raised on the task's thread by _open
            self._open_error = exc

    def _open(self) -> RecordProducer:
        if self.producer is None:
            self._opening.join()
            if self._open_error is not None:
                raise self._open_error
            assert self._opened is not None
            self.producer = self._opened
        return self.producer

    def write_batch(self, batch) -> None:
        if self.changes is not None:  # writeMode=upsert with a sequence or per-row topic / partition
            self.changes.append(batch)
            return
        if self.config.changelog is not None:  # writeMode=upsert, in the order the changes come
            batch = self._last_changes(pa.Table.from_batches([batch]))
        self._send(batch)

    def _last_changes(self, changes: pa.Table) -> pa.RecordBatch:
        """The records of ``changes`` reduced to the last change per key (writeMode=upsert)."""
        changelog = self.config.changelog
        assert changelog is not None  # writeMode=upsert only
        return changelog_records(changelog.reduce(changes), changelog.key_columns, self.config.passed_columns)

    def _send(self, batch) -> None:
        producer = self._open()
        if self.first_topic is None:
            self.first_topic = self.config.topic or next(
                (t for t in batch.column(batch.schema.names.index("topic")).to_pylist() if t), None)
            if self.first_topic is None:  # every row's topic is null (write_task hands over no empty batch)
                raise KafkaError("a row has a null 'topic' and the sink has no 'topic' option")
        if self.config.exactly_once and not self.in_transaction:
            if self.context.streaming:  # recorded before the id can leave a transaction open
                register_writer(self.config.client, self.config.registry_group(self.owner, self.context.partition_id),
                                self.first_topic)
            producer.begin()
            self.in_transaction = True
        producer.send(batch)

    def prepare_commit(self) -> list[Committable]:
        if self.changes:
            changes, self.changes = pa.Table.from_batches(self.changes), []
            self._send(self._last_changes(changes))
        producer = self._open()  # an empty task still fences its id
        producer.flush()
        if not self.config.exactly_once:
            return []
        committable = {"v": COMMITTABLE_VERSION, "owner": self.owner, "partition": self.context.partition_id,
                       "batch": self.context.batch_id, "transactionalId": producer.transactional_id,
                       "records": producer.deliveries.count, "ranges": producer.deliveries.ranges}
        if not self.in_transaction:
            return [committable]
        if self.context.streaming:
            # in a transaction: write_batch has set first_topic; streaming: a micro-batch id
            assert self.first_topic is not None and self.context.batch_id is not None
            marker_group = self.config.marker_group(self.owner, self.context.partition_id)
            try:
                producer.producer.send_offsets_to_transaction(
                    [TopicPartition(self.first_topic, 0, self.context.batch_id + 1)],
                    group_metadata(self.config.client, marker_group), REQUEST_TIMEOUT_SECONDS)
            except KafkaException as exc:
                raise KafkaError(f"adding the batch marker to transaction '{producer.transactional_id}': "
                                 f"{exc}") from None
            committable["marker"] = {"group": marker_group, "topic": self.first_topic}
        assert producer.session is not None  # exactly once: _open ran init_transactions
        producer_id, epoch = producer.session
        committable.update(producerId=producer_id, epoch=epoch)
        fault_point("kafka.after_prepare", batch_id=self.context.batch_id, attempt=self.context.attempt_number)
        return [committable]

    def abort(self) -> None:
        self._opening.join()  # a session still opening would otherwise outlive the task
        if self.producer is not None and self.in_transaction:
            self.producer.abort()
            self.in_transaction = False

    def close(self) -> None:
        """Drops the producer without ending its transaction: destroying a confluent-kafka
        producer leaves an open transaction open, for the driver to commit."""
        self._opening.join()
        self.producer = self._opened = None


def transaction_committed(config: KafkaSinkConfig, committable: Committable) -> bool:
    marker = committable.get("marker")
    if marker is None:
        return False
    return marker_offset(config.client, marker["group"], marker["topic"]) >= committable["batch"] + 1


def end_prepared(config: KafkaSinkConfig, committable: Committable, *, commit: bool):
    return end_transaction(config.client, committable["transactionalId"],
                           committable["producerId"], committable["epoch"], commit=commit)


class KafkaCommitter(Committer):
    """Driver side: EndTxn(commit) for each prepared transaction of the batch."""

    def __init__(self, config: KafkaSinkConfig):
        self.config = config

    def commit(self, requests: list[CommitRequest]) -> None:
        for request in requests:
            committable = request.committable
            if "producerId" not in committable:
                continue  # an empty task: nothing to commit
            try:
                result = end_prepared(self.config, committable, commit=True)
                refusal = None if result.ok else result.error_name
                if result.retriable:
                    request.retry_later()
                    continue
            except CoordinatorUnreachable as exc:
                refusal = str(exc)
            if refusal is None:
                continue
            if transaction_committed(self.config, committable):
                request.signal_already_committed()
            elif request.number_of_retries < MAX_COMMIT_ATTEMPTS - 1:
                request.retry_later()
            else:
                request.signal_failed_with_unknown_reason(CommitError(
                    f"transaction '{committable['transactionalId']}' of batch {committable['batch']} (partition "
                    f"{committable['partition']}, {committable['records']} records) was refused ({refusal}) and its "
                    "marker is not committed: it was aborted outside sparklink or exceeded transaction.timeout.ms; "
                    "its records are lost"))


class KafkaSink(Sink):
    """Built on the driver for every micro-batch (before its tasks, and again to commit). A commit
    a crash left unfinished is rolled forward by the SDK's lifecycle (sparklink.sink.recovery):
    before the tasks of the next micro-batch, and in the restore of every new run."""

    def __init__(self, options: Mapping[str, str] | None, schema: StructType):
        super().__init__(options, schema)
        self.config = KafkaSinkConfig.from_options(options, schema)

    def create_writer(self, context: WriterContext) -> KafkaWriter:
        return KafkaWriter(self.config, context)

    def create_committer(self) -> KafkaCommitter:
        return KafkaCommitter(self.config)

    def commit_log_dir(self):
        return super().commit_log_dir() if self.config.exactly_once else None

    def discard(self, committables: list[Committable]) -> None:
        """A replay of a committed batch, or a failed job: abort its prepared transactions."""
        for committable in committables:
            if "producerId" not in committable:
                continue
            try:
                result = end_prepared(self.config, committable, commit=False)
                outcome = result.error_name
            except CoordinatorUnreachable as exc:
                outcome = f"refused ({exc}); a newer session already fenced it"
            LOG.info("aborted transaction %s of partition %s: %s", committable["transactionalId"],
                     committable["partition"], outcome)

    def post_commit(self, batch_id: int | None, committables: list[Committable]) -> None:
        """Fence the transactional ids a crashed run used with more partitions than this batch
        (driver side, after the batch committed, before the next batch's tasks)."""
        if batch_id is None or not committables:
            return
        owner = committables[0]["owner"]
        used = {c["partition"] for c in committables}
        prefix = self.config.registry_prefix(owner)
        for group in registered_groups(self.config.client, prefix):
            partition_text = group[len(prefix):].removesuffix("-writer")
            if not group.endswith("-writer") or not partition_text.isdigit() or int(partition_text) in used:
                continue  # every task of this batch, empty ones included, initialised (fenced) its own id
            transactional_id = self.config.transactional_id(owner, int(partition_text))
            fence = Producer(dict(self.config.client, **{"transactional.id": transactional_id}))
            try:
                fence.init_transactions(REQUEST_TIMEOUT_SECONDS)
            except KafkaException as exc:
                raise KafkaError(f"fencing transactional id '{transactional_id}': {exc}") from None
            LOG.info("fenced transactional id %s (a partition this run no longer has)", transactional_id)
