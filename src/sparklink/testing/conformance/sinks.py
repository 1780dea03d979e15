"""The exactly-once conformance suite for sinks, as an abstract pytest class (test side).

Subclass :class:`SinkConformance` in a test module (its name must start with ``Test``), say
which format to write and how to build and read a fresh output, and pytest runs the whole
sequence against that sink::

    class TestMySink(SinkConformance):
        format = "my.sink"
        data_source = "my_package.sinks:MySinkDataSource"   # registered in every driver process
        sink_factory = MySink                                # (options, schema) -> Sink

        @pytest.fixture
        def sink_options(self, tmp_path):
            return {"path": str(tmp_path / "out")}

        def read_ids(self, options):
            return plain_reader_ids(options["path"])

The check is always the same: after a fault and a restart, a plain reader sees every input id
exactly once, and :meth:`SinkConformance.leftovers` finds nothing partial left behind.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql.types import StructType

from sparklink.errors import FaultInjected
from sparklink.faults import ENV_FAULT, fault_point
from sparklink.sink import Sink, WriterContext
from sparklink.sink.protocol import commit_batch
from sparklink.spark.registration import register_data_source
from sparklink.spark.sink_adapter import SinkCommitMessage, SinkStreamWriter
from sparklink.testing.conformance.jobs import sequence_to_sink
from sparklink.testing.conformance.outputs import SEQUENCE_SCHEMA
from sparklink.testing.faults import ENV_BATCH

SINK_JOB = "sparklink.testing.conformance.jobs:sequence_to_sink"
# The SDK's named fault points, in protocol order; a connector adds its own (connector_points).
SDK_POINTS = ("writer.after_write", "sink.before_commit", "sink.before_log", "sink.after_log", "sink.after_commit")
SIMULATED_BATCHES = 3       # the simulated crash sequence: batches 0, 1 (crashed, replayed), 2
SIMULATED_ROWS = 10         # rows per batch: ids 10*b .. 10*b+9
ALL_IDS = list(range(300))  # 3 splits x 100 rows, 100 rows per trigger: 3 micro-batches
SEQ_ROWS = 150              # the kill sequence: 450 rows, 100 per trigger: 5 micro-batches


def load_attribute(spec: str):
    """``"module:attribute"`` -> the attribute."""
    module_name, _, attribute = spec.partition(":")
    return getattr(importlib.import_module(module_name), attribute)


def _staged_writer(sink: Sink, batch_id: int | None, partition: int, attempt: int, ids: list[int], job_id: str):
    """A task's writer after it wrote ``ids`` (column ``split`` = the partition) and flushed."""
    context = WriterContext(partition_id=partition, attempt_number=attempt, task_attempt_id=attempt * 100 + partition,
                            job_id=job_id, batch_id=batch_id, query_id="conformance-query")
    writer = sink.create_writer(context)
    writer.write_batch(pa.RecordBatch.from_pydict({"id": pa.array(ids, pa.int64()),
                                                   "split": pa.array([partition] * len(ids), pa.int32())}))
    writer.flush()
    return writer


def write_attempt(sink: Sink, batch_id: int | None, partition: int, attempt: int, ids: list[int],
                  job_id: str) -> list:
    """One task attempt as Spark's adapter runs it on an executor: write, flush, prepare, close;
    returns its committables."""
    writer = _staged_writer(sink, batch_id, partition, attempt, ids, job_id)
    try:
        return writer.prepare_commit()
    finally:
        writer.close()


def crashing_task(sink: Sink, batch_id: int, partition: int, ids: list[int], job_id: str,
                  attempt: int = 0) -> SinkCommitMessage:
    """One streaming task as Spark's adapter runs it on an executor (write, flush, prepare,
    ``writer.after_write``), except that a fault raised inside is a crash of the process: the
    writer is abandoned, neither aborted nor closed, as a SIGKILL leaves it."""
    writer = _staged_writer(sink, batch_id, partition, attempt, ids, job_id)
    committables = writer.prepare_commit()
    fault_point("writer.after_write", batch_id=batch_id, attempt=attempt)  # where the adapter's task has it
    writer.close()
    return SinkCommitMessage(partition_id=partition, attempt_number=attempt, query_id="conformance-query",
                             committables=committables)


def run_micro_batch(sink: Sink, batch_id: int, partitions: int, job_id: str) -> None:
    """Spark's calls for one micro-batch of ids ``10*batch_id .. 10*batch_id+9``: the stream
    writer built on the "driver" (the sink's per-micro-batch check, and its restore when that
    asks), the tasks on "executors", then the adapter's ``commit(messages, batchId)``."""
    ids = list(range(batch_id * SIMULATED_ROWS, (batch_id + 1) * SIMULATED_ROWS))
    stream_writer = SinkStreamWriter(sink, query_id="conformance-query")
    messages = [crashing_task(sink, batch_id, p, ids[p::partitions], job_id) for p in range(partitions)]
    stream_writer.commit(messages, batch_id)


class SinkConformance:
    """Abstract exactly-once suite for one sink configuration (override the marked members)."""

    #: the name given to ``writeStream.format`` (override)
    format: str = ""
    #: ``"module:attribute"`` of the PySpark DataSource class to register in driver processes and
    #: in the ``spark`` session; None for formats ``sparklink.register`` registers already
    data_source: str | None = None
    #: builds the sink from its options as Spark's adapter does: a Sink subclass or a callable
    #: ``(options, schema) -> Sink`` (the same argument ``as_data_source`` takes; override)
    sink_factory: Callable[[Mapping[str, str], StructType], Sink] | None = None
    #: False for sinks where several queries may share one output (documented for PostgreSQL)
    refuses_second_query: bool = True
    #: the fault points the connector itself adds (crashed at by simulation, like the SDK's)
    connector_points: tuple[str, ...] = ()
    #: where the real SIGKILL sequence kills the driver, one point per micro-batch; () when the
    #: connector family's real SIGKILLs run in another suite (the test then says so and skips)
    sigkill_points: tuple[str, ...] = ("writer.after_write", "sink.after_log", "sink.after_commit")
    #: rows per split of the SIGKILL sequence (3 splits, 100 rows per micro-batch): the default
    #: gives 5 micro-batches; with one kill point, 50 gives 2 (the kill in the second, whose
    #: replay is all the finishing run does)
    sigkill_rows_per_split: int = SEQ_ROWS
    #: where tasks fail on their first attempt, one point per micro-batch (at most 3); a connector
    #: adds the points its writers have
    task_failure_points: tuple[str, ...] = ("writer.after_write",)

    # ------------------------------------------------------------ what a subclass provides

    @pytest.fixture
    def sink_options(self, tmp_path: Path) -> dict:
        """Options of a fresh output of this sink (override; may use other fixtures)."""
        pytest.fail(f"{type(self).__name__} must override the 'sink_options' fixture")

    def read_ids(self, options: dict) -> list[int]:
        """Sorted ids a plain reader of the output sees (override)."""
        raise NotImplementedError(f"{type(self).__name__} must override read_ids(options)")

    def leftovers(self, options: dict) -> list[str]:
        """Partial state left behind (staged files with data, prepared transactions); [] is clean."""
        return []

    def finishing_options(self, options: dict) -> dict:
        """Options of the run that finishes a sequence (e.g. a rolling policy that rolls every
        file, so that all data is visible to ``read_ids``); the same options by default."""
        return options

    def make_sink(self, options: dict) -> Sink:
        """A sink object built from ``options`` as Spark's adapter builds it on the driver."""
        factory = type(self).sink_factory  # through the class: a plain function stays unbound
        if factory is None:
            raise NotImplementedError(f"{type(self).__name__} must set sink_factory or override make_sink(options)")
        return factory(options, SEQUENCE_SCHEMA)

    # ------------------------------------------------------------ helpers of the sequence

    def job_args(self, options: dict, tmp_path: Path, **overrides) -> dict:
        args = {"fmt": self.format, "options": options, "checkpoint": str(tmp_path / "ck"),
                "data_source": self.data_source}
        args.update(overrides)
        return args

    def assert_exactly_once(self, options: dict, expected: list[int] = ALL_IDS) -> None:
        ids = self.read_ids(options)
        assert ids == expected, f"{len(ids)} ids seen, {len(set(ids))} distinct; expected {len(expected)}"
        assert self.leftovers(options) == []

    # ------------------------------------------------------------ the suite

    @pytest.mark.slow
    def test_sigkill_at_each_protocol_point_with_restarts_on_other_partition_counts(self, sink_options, driver,
                                                                                     tmp_path, spark):
        """One query, a driver process per point of ``sigkill_points``, each SIGKILLed (its whole
        process group) at that point in micro-batch 1, 2, 3...; each restart uses another number
        of partitions. The last restart runs to the end in the test's own session."""
        if not self.sigkill_points:
            pytest.skip(f"{type(self).__name__}: this connector family's real SIGKILL sequences run in its own "
                        "suite; every fault point is crashed at by simulation here")
        partition_counts = (2, 3, 1)
        for batch, point in enumerate(self.sigkill_points, start=1):
            partitions = partition_counts[(batch - 1) % len(partition_counts)]
            crashed = driver.run(SINK_JOB, self.job_args(sink_options, tmp_path, partitions=partitions,
                                                         rows_per_split=self.sigkill_rows_per_split),
                                 fault=f"{point}:kill", once_marker=str(tmp_path / f"fired-{batch}"),
                                 env={ENV_BATCH: str(batch)})
            assert crashed.killed, f"{point}: {crashed.output}"
            assert (tmp_path / f"fired-{batch}").exists()
        sequence_to_sink(spark, **self.job_args(self.finishing_options(sink_options), tmp_path, partitions=2,
                                                rows_per_split=self.sigkill_rows_per_split))
        self.assert_exactly_once(sink_options, expected=list(range(3 * self.sigkill_rows_per_split)))

    @classmethod
    def fault_points(cls) -> tuple[str, ...]:
        return SDK_POINTS + tuple(cls.connector_points)

    def pytest_generate_tests(self, metafunc):
        """One simulated-crash test per fault point of this sink (pytest calls this per test)."""
        if "crash_point" in metafunc.fixturenames:
            metafunc.parametrize("crash_point", metafunc.cls.fault_points())

    def test_simulated_crash_at_fault_point(self, crash_point, sink_options, tmp_path, monkeypatch):
        """Spark's calls for micro-batch 0 succeed; in micro-batch 1 ``crash_point`` raises,
        which stands for the process dying there (a task's writer is abandoned, not aborted);
        then, as after a restart, the sink is built again from its options, Spark replays batch
        1 on another number of tasks and runs batch 2: every id once, nothing partial left."""
        options = dict(sink_options, checkpointLocation=str(tmp_path / "ck"))
        run_micro_batch(self.make_sink(options), 0, 2, "job-0")
        with monkeypatch.context() as armed:
            armed.setenv(ENV_FAULT, f"{crash_point}:raise")
            armed.setenv(ENV_BATCH, "1")
            with pytest.raises(FaultInjected, match=crash_point.replace(".", r"\.")):
                run_micro_batch(self.make_sink(options), 1, 2, "job-1")
        run_micro_batch(self.make_sink(options), 1, 3, "job-1-replayed")
        run_micro_batch(self.make_sink(self.finishing_options(options)), 2, 2, "job-2")
        self.assert_exactly_once(options, expected=list(range(SIMULATED_BATCHES * SIMULATED_ROWS)))

    def test_task_failing_on_its_first_attempt(self, sink_options, armed, tmp_path, spark):
        """In the shared session (``local[2,3]``: a task may fail twice), in micro-batch i every
        task's first attempt fails at ``task_failure_points[i]`` after it staged its output;
        Spark retries it, its abort removes what the failed attempt staged, and the output holds
        every id once. When ``finishing_options`` differ, one more micro-batch with them makes
        everything visible first."""
        points = self.task_failure_points
        assert 0 < len(points) <= 3, "one point per micro-batch of the job (3 micro-batches)"
        faults = ",".join(f"{point}:raise@{batch}" for batch, point in enumerate(points))
        with armed(faults, attempt=0):
            sequence_to_sink(spark, **self.job_args(sink_options, tmp_path))
        expected = ALL_IDS
        if self.finishing_options(sink_options) != sink_options:
            sequence_to_sink(spark, **self.job_args(self.finishing_options(sink_options), tmp_path, rows_per_split=110))
            expected = list(range(330))
        self.assert_exactly_once(sink_options, expected)

    def test_second_query_on_the_same_output_is_refused(self, sink_options, spark, tmp_path):
        if not self.refuses_second_query:
            pytest.skip(f"{type(self).__name__}: several queries may write one output")
        if self.data_source:
            register_data_source(spark, load_attribute(self.data_source))

        def start(checkpoint, options):
            writer = (spark.readStream.format("sparklink.sequence").option("numSplits", 3)
                      .option("rowsPerSplit", 100).load()
                      .writeStream.format(self.format).option("checkpointLocation", str(tmp_path / checkpoint)))
            for key, value in options.items():
                writer = writer.option(key, str(value))
            return writer.trigger(availableNow=True).start()

        # the first query runs with the finishing options, so that all its rows are visible
        start("ck1", self.finishing_options(sink_options)).awaitTermination()
        second = start("ck2", sink_options)
        with pytest.raises(Exception, match="belongs to streaming query"):
            second.awaitTermination()
        self.assert_exactly_once(sink_options)

    # The sink objects are built and called exactly as Spark's adapter does (writers on
    # "executors", commit_batch on the "driver"), against the real output, to produce call
    # sequences that local Spark will not produce on demand: two attempts of one task, a commit
    # called twice, an old batch after a newer one.

    def test_two_attempts_of_one_task_commit_once_and_commit_twice_is_a_no_op(self, sink_options, tmp_path):
        options = dict(sink_options, checkpointLocation=str(tmp_path / "ck"))
        sink = self.make_sink(options)
        loser = write_attempt(sink, 0, 0, 0, [0, 1, 2], "job-a")   # a speculative attempt, never committed
        winner = write_attempt(sink, 0, 0, 1, [0, 1, 2], "job-a")
        other = write_attempt(sink, 0, 1, 0, [3, 4], "job-a")
        assert commit_batch(sink, 0, "job-a", winner + other, ["conformance-query"]) is True
        # Spark replays batch 0 (its commit was not recorded): the replay is discarded
        sink = self.make_sink(options)
        replay = write_attempt(sink, 0, 0, 0, [0, 1, 2], "job-b") + write_attempt(sink, 0, 1, 0, [3, 4], "job-b")
        assert commit_batch(sink, 0, "job-b", replay, ["conformance-query"]) is False
        sink = self.make_sink(self.finishing_options(options))
        newer = write_attempt(sink, 1, 0, 0, [5], "job-c")
        assert commit_batch(sink, 1, "job-c", newer, ["conformance-query"]) is True
        # an older batch arriving after a newer one is not committed again
        sink = self.make_sink(self.finishing_options(options))
        older = write_attempt(sink, 0, 0, 0, [0, 1, 2], "job-d")
        assert commit_batch(sink, 0, "job-d", older, ["conformance-query"]) is False
        sink.discard(loser)  # Spark's abort for the attempt whose result was not used
        sink.post_commit(1, [])
        self.assert_exactly_once(options, expected=[0, 1, 2, 3, 4, 5])
