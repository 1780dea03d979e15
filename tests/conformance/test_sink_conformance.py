"""The exactly-once conformance suite: every sink goes through the same tests.

Here every sink goes through the protocol points all sinks share; connector-specific fault
points (``filesink.*``, ``compaction.*``, ``postgres.*``) are killed at in the connectors' own
suites (tests/files, tests/postgres). The check is always the same: after the fault and a
restart, a plain reader sees every input id exactly once, and nothing partial is left behind
(no staged or in-progress file with data, no prepared transaction).
"""

from __future__ import annotations

import pyarrow as pa
import pytest

from sparklink.sink import WriterContext
from sparklink.sink.protocol import commit_batch
from tests.conformance.cases import SINK_CASES

JOB = "tests.conformance.jobs:sequence_to_sink"
ALL_IDS = list(range(300))  # 3 splits x 100 rows, 100 rows per trigger: 3 micro-batches
SEQ_ROWS = 150              # the kill sequence: 450 rows, 100 per trigger: 5 micro-batches


@pytest.fixture(params=SINK_CASES, ids=lambda case: case.name)
def case(request):
    return request.param


@pytest.fixture
def setup(case, tmp_path, request):
    """(case, options, pg) for a fresh output of the case's sink."""
    pg = request.getfixturevalue("postgres") if case.needs_postgres else None
    return case, case.options(tmp_path, pg), pg


def job_args(case, options, tmp_path, **overrides):
    args = {"fmt": case.fmt, "options": options, "checkpoint": str(tmp_path / "ck")}
    args.update(overrides)
    return args


def assert_exactly_once(case, options, pg, expected=ALL_IDS):
    assert case.read_ids(options, pg) == expected
    assert case.leftovers(options, pg) == []


@pytest.mark.slow
def test_sigkill_at_each_protocol_point_with_restarts_on_other_partition_counts(setup, driver, tmp_path):
    """One query, four driver processes: killed after the tasks staged their output (batch 1),
    inside commit after the log entry (batch 2), after the sink's commit but before Spark's
    (batch 3), then run to the end. Each restart uses a different number of partitions."""
    case, options, pg = setup
    kills = [("writer.after_write", 1, 2), ("sink.after_log", 2, 3), ("sink.after_commit", 3, 1)]
    for point, batch, partitions in kills:
        crashed = driver.run(JOB, job_args(case, options, tmp_path, partitions=partitions, rows_per_split=SEQ_ROWS),
                             fault=f"{point}:kill", once_marker=str(tmp_path / f"fired-{batch}"),
                             env={"SPARKLINK_FAULT_BATCH": str(batch)})
        assert crashed.killed, f"{point}: {crashed.output}"
        assert (tmp_path / f"fired-{batch}").exists()
    finished = driver.run(JOB, job_args(case, options, tmp_path, partitions=2, rows_per_split=SEQ_ROWS))
    assert finished.ok, finished.output
    assert_exactly_once(case, options, pg, expected=list(range(3 * SEQ_ROWS)))


@pytest.mark.slow
def test_task_failing_on_its_first_attempt(setup, driver, tmp_path):
    case, options, pg = setup
    result = driver.run(JOB, job_args(case, options, tmp_path), fault="writer.after_write:raise",
                        env={"SPARKLINK_FAULT_ATTEMPT": "0"}, master="local[2,3]")
    assert result.ok, result.output
    assert_exactly_once(case, options, pg)


def test_second_query_on_the_same_output_is_refused(setup, spark, tmp_path):
    case, options, pg = setup
    if not case.refuses_second_query:
        pytest.skip(f"{case.name}: several queries may write one table (documented in docs/postgres.md)")

    def start(checkpoint):
        writer = (spark.readStream.format("sparklink.sequence").option("numSplits", 3).option("rowsPerSplit", 100)
                  .load().writeStream.format(case.fmt).option("checkpointLocation", str(tmp_path / checkpoint)))
        for key, value in options.items():
            writer = writer.option(key, str(value))
        return writer.trigger(availableNow=True).start()

    start("ck1").awaitTermination()
    second = start("ck2")
    with pytest.raises(Exception, match="belongs to streaming query"):
        second.awaitTermination()
    assert_exactly_once(case, options, pg)


# --------------------------------------------------- protocol sequences, driven directly
# The sink objects are built and called exactly as Spark's adapter does (writers on "executors",
# commit_batch on the "driver"), against real files and a real PostgreSQL, to produce call
# sequences that local Spark will not produce on demand: two attempts of one task, a commit
# called twice, an old batch after a newer one.


def write_attempt(sink, batch_id, partition, attempt, ids, job_id):
    context = WriterContext(partition_id=partition, attempt_number=attempt, task_attempt_id=attempt * 100 + partition,
                            job_id=job_id, batch_id=batch_id, query_id="conformance-query")
    writer = sink.create_writer(context)
    try:
        writer.write_batch(pa.RecordBatch.from_pydict({"id": pa.array(ids, pa.int64()),
                                                       "split": pa.array([partition] * len(ids), pa.int32())}))
        writer.flush()
        return writer.prepare_commit()
    finally:
        writer.close()


def test_two_attempts_of_one_task_commit_once_and_commit_twice_is_a_no_op(setup, tmp_path):
    case, options, pg = setup
    options = dict(options, checkpointLocation=str(tmp_path / "ck"))
    sink = case.make_sink(options)
    loser = write_attempt(sink, 0, 0, 0, [0, 1, 2], "job-a")   # a speculative attempt, never committed
    winner = write_attempt(sink, 0, 0, 1, [0, 1, 2], "job-a")
    other = write_attempt(sink, 0, 1, 0, [3, 4], "job-a")
    assert commit_batch(sink, 0, "job-a", winner + other, ["conformance-query"]) is True
    # Spark replays batch 0 (its commit was not recorded): the replay is discarded
    sink = case.make_sink(options)
    replay = write_attempt(sink, 0, 0, 0, [0, 1, 2], "job-b") + write_attempt(sink, 0, 1, 0, [3, 4], "job-b")
    assert commit_batch(sink, 0, "job-b", replay, ["conformance-query"]) is False
    sink = case.make_sink(options)
    newer = write_attempt(sink, 1, 0, 0, [5], "job-c")
    assert commit_batch(sink, 1, "job-c", newer, ["conformance-query"]) is True
    # an older batch arriving after a newer one is not committed again
    sink = case.make_sink(options)
    older = write_attempt(sink, 0, 0, 0, [0, 1, 2], "job-d")
    assert commit_batch(sink, 0, "job-d", older, ["conformance-query"]) is False
    sink.discard(loser)  # Spark's abort for the attempt whose result was not used
    sink.post_commit(1, [])
    assert_exactly_once(case, options, pg, expected=[0, 1, 2, 3, 4, 5])
