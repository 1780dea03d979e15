"""The exactly-once conformance suite: every sink goes through the same tests.

The check is always the same: after the fault and a restart, a plain reader sees every input
id exactly once, and nothing partial is left behind (no staged or in-progress file with data,
no prepared transaction).
"""

from __future__ import annotations

import pyarrow as pa
import pytest

from sparklink.sink import WriterContext
from sparklink.sink.protocol import commit_batch
from tests.conformance.cases import SINK_CASES

JOB = "tests.conformance.jobs:sequence_to_sink"
COMMON_KILL_POINTS = ["writer.after_write", "sink.after_log", "sink.after_commit"]
ALL_IDS = list(range(300))  # 3 splits x 100 rows, 100 rows per trigger: 3 micro-batches


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


def kill_points():
    for case in SINK_CASES:
        for point in COMMON_KILL_POINTS + case.extra_fault_points:
            yield pytest.param(case, point, id=f"{case.name}-{point}")


@pytest.mark.slow
@pytest.mark.parametrize(("kill_case", "point"), list(kill_points()))
def test_sigkill_at_a_protocol_point_then_restart(kill_case, point, driver, tmp_path, request):
    pg = request.getfixturevalue("postgres") if kill_case.needs_postgres else None
    options = kill_case.options(tmp_path, pg)
    args = job_args(kill_case, options, tmp_path)
    crashed = driver.run(JOB, args, fault=f"{point}:kill", once_marker=str(tmp_path / "fired"),
                         env={"SPARKLINK_FAULT_BATCH": "1"})
    assert crashed.killed, crashed.output
    restarted = driver.run(JOB, args)
    assert restarted.ok, restarted.output
    assert_exactly_once(kill_case, options, pg)


@pytest.mark.slow
def test_task_failing_on_its_first_attempt(setup, driver, tmp_path):
    case, options, pg = setup
    result = driver.run(JOB, job_args(case, options, tmp_path), fault="writer.after_write:raise",
                        env={"SPARKLINK_FAULT_ATTEMPT": "0"}, master="local[2,3]")
    assert result.ok, result.output
    assert_exactly_once(case, options, pg)


@pytest.mark.slow
def test_restart_with_a_different_number_of_partitions(setup, driver, tmp_path):
    case, options, pg = setup
    crashed = driver.run(JOB, job_args(case, options, tmp_path, partitions=2), fault="sink.after_log:kill",
                         once_marker=str(tmp_path / "fired"), env={"SPARKLINK_FAULT_BATCH": "1"})
    assert crashed.killed, crashed.output
    restarted = driver.run(JOB, job_args(case, options, tmp_path, partitions=3))
    assert restarted.ok, restarted.output
    assert_exactly_once(case, options, pg)


@pytest.mark.slow
def test_second_query_on_the_same_output_is_refused(setup, driver, tmp_path):
    case, options, pg = setup
    if not case.refuses_second_query:
        pytest.skip(f"{case.name}: several queries may write one table (documented in docs/postgres.md)")
    first = driver.run(JOB, job_args(case, options, tmp_path))
    assert first.ok, first.output
    second = driver.run(JOB, job_args(case, options, tmp_path, checkpoint=str(tmp_path / "ck2")))
    assert not second.ok and "belongs to streaming query" in second.output
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
