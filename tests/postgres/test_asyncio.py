"""ordered_wait / unordered_wait on local Spark, with plain coroutines and the PostgreSQL lookup."""

from __future__ import annotations

import asyncio
import uuid

import pyarrow as pa
import pyarrow.compute  # noqa: F401 - pa.compute in SlowGroups
import pytest
from pyspark.sql.types import LongType, StringType, StructField, StructType

from sparklink.asyncio import AsyncLookupError, AsyncRunner, NO_DEFAULT, ordered_wait, unordered_wait
from sparklink.errors import ConfigError
from sparklink.postgres.lookup import PostgresLookup

OUT = StructType([StructField("square", LongType())])


async def slow_square(row):
    await asyncio.sleep(0.001 * (7 - row["id"] % 7))  # later rows often finish first
    return {"square": row["id"] * row["id"]}


@pytest.mark.parametrize("wait", [ordered_wait, unordered_wait], ids=["ordered", "unordered"])
def test_enriches_every_row(spark, wait):
    frame = spark.range(0, 200, numPartitions=2)
    rows = wait(frame, slow_square, OUT, timeout=5, capacity=16).collect()
    assert sorted((r.id, r.square) for r in rows) == [(i, i * i) for i in range(200)]


def _runner(fn, *, ordered, timeout=1.0, capacity=8, retries=0, default=NO_DEFAULT):
    return AsyncRunner(fn, pa.schema([pa.field("id", pa.int64())]), pa.schema([pa.field("square", pa.int64())]),
                       ordered=ordered, timeout=timeout, capacity=capacity, retries=retries, default=default)


def _input(n: int):
    return iter([pa.RecordBatch.from_pydict({"id": pa.array(range(n), pa.int64())})])


def test_ordered_keeps_input_order_and_unordered_does_not():
    ordered = [r["id"] for b in _runner(slow_square, ordered=True).run(_input(50)) for r in b.to_pylist()]
    unordered = [r["id"] for b in _runner(slow_square, ordered=False).run(_input(50)) for r in b.to_pylist()]
    assert ordered == list(range(50))
    assert sorted(unordered) == list(range(50)) and unordered != list(range(50))


def test_capacity_bounds_requests_in_flight():
    state = {"now": 0, "peak": 0}

    async def tracked(row):
        state["now"] += 1
        state["peak"] = max(state["peak"], state["now"])
        await asyncio.sleep(0.002)
        state["now"] -= 1
        return (row["id"],)

    list(_runner(tracked, ordered=False, capacity=5).run(_input(60)))
    assert state["peak"] == 5


class ClosesAfterCalls:
    """A per-row async function with a resource: records whether any call was still running
    (not yet through its clean-up) when ``close`` ran."""

    def __init__(self) -> None:
        self.running = 0
        self.running_at_close: int | None = None

    async def __call__(self, row):
        self.running += 1
        try:
            if row["id"] == 0:
                raise ValueError("bad row")
            await asyncio.sleep(10)
            return (row["id"],)
        finally:
            await asyncio.sleep(0.05)  # clean-up that itself waits (returning a connection, say)
            self.running -= 1

    async def close(self) -> None:
        self.running_at_close = self.running


@pytest.mark.parametrize("ordered", [True, False], ids=["ordered", "unordered"])
def test_a_failing_call_cancels_the_others_and_waits_for_them_before_close(ordered):
    fn = ClosesAfterCalls()
    with pytest.raises(AsyncLookupError, match="bad row"):
        list(_runner(fn, ordered=ordered, timeout=30, capacity=8).run(_input(20)))
    assert fn.running_at_close == 0


async def never(row):
    await asyncio.sleep(10)


def test_timeout_raises_a_clear_error():
    with pytest.raises(AsyncLookupError, match=r"failed 2 time\(s\) \(timeout 0.05s, retries 1\).*no result"):
        list(_runner(never, ordered=True, timeout=0.05, retries=1).run(_input(3)))


def test_timeout_yields_the_default():
    rows = [r for b in _runner(never, ordered=True, timeout=0.02, default={"square": -1}).run(_input(4))
            for r in b.to_pylist()]
    assert rows == [{"id": i, "square": -1} for i in range(4)]


def test_retries_recover_from_transient_failures():
    calls: dict[int, int] = {}

    async def flaky(row):
        calls[row["id"]] = calls.get(row["id"], 0) + 1
        if calls[row["id"]] < 3:
            raise ConnectionError("transient")
        return (row["id"] * 2,)

    rows = [r for b in _runner(flaky, ordered=True, retries=2).run(_input(5)) for r in b.to_pylist()]
    assert [r["square"] for r in rows] == [0, 2, 4, 6, 8]


@pytest.mark.parametrize(("kwargs", "problem"), [
    ({"timeout": 0}, "timeout"), ({"capacity": 0}, "capacity"), ({"retries": -1}, "retries"),
], ids=["timeout", "capacity", "retries"])
def test_bad_arguments(spark, kwargs, problem):
    with pytest.raises(ConfigError, match=problem):
        ordered_wait(spark.range(1), slow_square, OUT, **kwargs)


@pytest.mark.parametrize("wait", [ordered_wait, unordered_wait], ids=["ordered", "unordered"])
def test_postgres_lookup(spark, postgres, wait):
    table = f'cust "{uuid.uuid4().hex[:6]}"'
    quoted = '"' + table.replace('"', '""') + '"'
    with postgres.connect() as conn:
        conn.execute(f'CREATE TABLE {quoted} (cid bigint PRIMARY KEY, "Name" text)')
        conn.execute(f"INSERT INTO {quoted} SELECT g, 'name-' || g FROM generate_series(0, 99, 2) g")
    lookup = PostgresLookup(postgres.dsn, table=quoted, keys={"cid": "id"}, columns=["Name"], pool_size=4)
    schema = StructType([StructField("Name", StringType())])
    rows = wait(spark.range(0, 100, numPartitions=2), lookup, schema, timeout=10, capacity=8).collect()
    got = {r.id: r.Name for r in rows}
    assert got == {i: (f"name-{i}" if i % 2 == 0 else None) for i in range(100)}


def _lookup_table(postgres) -> str:
    table = f"pairs_{uuid.uuid4().hex[:6]}"
    with postgres.connect() as conn:
        conn.execute(f"CREATE TABLE {table} (a bigint, b text, label text, PRIMARY KEY (a, b))")
        conn.execute(f"INSERT INTO {table} SELECT g, 'x' || (g % 3), 'label-' || g FROM generate_series(0, 99) g")
    return table


@pytest.mark.parametrize("ordered", [True, False], ids=["ordered", "unordered"])
def test_batched_lookup_with_two_key_columns_and_raw_query(postgres, ordered):
    table = _lookup_table(postgres)
    schema = pa.schema([pa.field("a", pa.int64()), pa.field("b", pa.string())])
    keys = pa.RecordBatch.from_pydict({"a": pa.array(list(range(0, 120)) + [None], pa.int64()),
                                       "b": pa.array([f"x{i % 3}" if i % 10 else "nope" for i in range(120)]
                                                     + ["x0"])}, schema=schema)
    out = pa.schema([pa.field("label", pa.string())])
    expected = {(i, f"x{i % 3}" if i % 10 else "nope"): (f"label-{i}" if i < 100 and i % 10 else None)
                for i in range(120)}
    expected[(None, "x0")] = None
    for lookup in (PostgresLookup(postgres.dsn, table=table, keys={"a": "a", "b": "b"}, columns=["label"],
                                  pool_size=3),
                   PostgresLookup(postgres.dsn, query=f"SELECT label FROM {table} WHERE a = %(a)s AND b = %(b)s",
                                  pool_size=3)):
        runner = AsyncRunner(lookup, schema, out, ordered=ordered, timeout=10, capacity=30, retries=0,
                             default=NO_DEFAULT)
        assert runner.batched
        rows = [r for b in runner.run(iter([keys.slice(0, 50), keys.slice(50)])) for r in b.to_pylist()]
        assert {(r["a"], r["b"]): r["label"] for r in rows} == expected
        if ordered:
            assert [(r["a"], r["b"]) for r in rows] == list(zip(keys.column(0).to_pylist(), keys.column(1).to_pylist()))


class SlowGroups:
    """A batched lookup that sleeps, tracking the rows in flight."""

    parallelism = 4

    def __init__(self, delay: float):
        self.delay = delay
        self.rows_in_flight = 0
        self.peak = 0

    async def __call__(self, row):
        raise AssertionError("a batched lookup is not called per row")

    async def lookup_batch(self, batch, output_schema):
        self.rows_in_flight += batch.num_rows
        self.peak = max(self.peak, self.rows_in_flight)
        await asyncio.sleep(self.delay)
        self.rows_in_flight -= batch.num_rows
        ids = batch.column(0)
        return [pa.compute.multiply(ids, ids)]


def test_batched_groups_respect_capacity_and_timeout_default():
    lookup = SlowGroups(0.002)
    rows = [r for b in _runner(lookup, ordered=True, capacity=10).run(_input(97)) for r in b.to_pylist()]
    assert rows == [{"id": i, "square": i * i} for i in range(97)]
    assert lookup.peak <= 12  # 4 groups of ceil(10 / 4) = 3 rows
    slow = SlowGroups(1.0)
    rows = [r for b in _runner(slow, ordered=False, timeout=0.02, default={"square": -1}).run(_input(5))
            for r in b.to_pylist()]
    assert sorted(r["id"] for r in rows) == list(range(5)) and {r["square"] for r in rows} == {-1}
    with pytest.raises(AsyncLookupError, match=r"group of 2 row\(s\) failed 1 time\(s\)"):
        list(_runner(slow, ordered=True, timeout=0.02, capacity=8).run(_input(2)))
