"""Asynchronous enrichment of a DataFrame (Flink's AsyncFunction, section 8.5).

``ordered_wait(df, async_fn, output_schema, ...)`` and ``unordered_wait(...)`` return ``df``
with the columns of ``output_schema`` appended. ``async_fn(row)`` is a coroutine function that
receives one input row as a dict and returns the added columns (a dict, a tuple in
``output_schema`` order, or None for all-null). It runs with ``mapInArrow`` on the executors:
each task runs one asyncio event loop that keeps at most ``capacity`` calls in flight.

* ordered: rows come out in input order (a slow call holds back the ones behind it);
* unordered: rows come out as their calls complete (less waiting; order is not kept).

Each call is limited to ``timeout`` seconds and tried ``1 + retries`` times. When every try
fails, the task fails with :class:`AsyncLookupError`, unless ``default`` is given: then the row
gets ``default`` (same forms as a result) instead.

``async_fn`` may be an object with ``async open()`` / ``async close()`` methods (Flink's
RichAsyncFunction): they run once per task on its event loop, for pools and connections.
Everything passed in is pickled to the executors.

Batched lookups: an ``async_fn`` object with ``async lookup_batch(batch, output_schema)`` (such
as :class:`sparklink.postgres.lookup.PostgresLookup`) is called once per *group* of rows, a
``pyarrow.RecordBatch`` slice of the input, and returns the output columns for those rows (a
list of ``pyarrow.Array``, one per ``output_schema`` field, each as long as the group). Then
``capacity`` bounds the *rows* in flight: each group holds ``ceil(capacity / parallelism)``
rows, where ``parallelism`` is the object's ``parallelism`` attribute (for PostgresLookup, its
pool size), so up to ``parallelism`` groups run at once. Timeout, retries and default apply to
a group as a whole; ordered mode emits groups in input order, unordered as they complete. No
per-row coroutine, and input and output stay Arrow.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any, Protocol, cast

import pyarrow as pa

from sparklink.errors import ConfigError, SparklinkError

AsyncFunction = Callable[[dict[str, Any]], Awaitable[Any]]
NO_DEFAULT = object()
OUTPUT_BATCH_ROWS = 4096


class BatchedLookup(Protocol):
    """An ``async_fn`` object that also looks up a group of rows at once (see the module docstring)."""

    def lookup_batch(self, batch: pa.RecordBatch, output_schema: pa.Schema) -> Awaitable[list[pa.Array]]: ...


class AsyncLookupError(SparklinkError):
    """An asynchronous call failed or timed out on every try, and no default was configured."""


def _validate(timeout: float, capacity: int, retries: int) -> None:
    if not (isinstance(timeout, (int, float)) and timeout > 0):
        raise ConfigError("timeout", f"must be a positive number of seconds, got {timeout!r}")
    if not (isinstance(capacity, int) and capacity >= 1):
        raise ConfigError("capacity", f"must be an integer of at least 1, got {capacity!r}")
    if not (isinstance(retries, int) and retries >= 0):
        raise ConfigError("retries", f"must be an integer of at least 0, got {retries!r}")


def _as_columns(result: Any, names: list[str]) -> tuple[Any, ...]:
    if result is None:
        return (None,) * len(names)
    if isinstance(result, dict):
        unknown = set(result) - set(names)
        if unknown:
            raise AsyncLookupError(f"async function returned unknown column(s) {sorted(unknown)}; "
                                   f"output_schema has {names}")
        return tuple(result.get(n) for n in names)
    if isinstance(result, (tuple, list)):
        if len(result) != len(names):
            raise AsyncLookupError(f"async function returned {len(result)} values for {len(names)} columns {names}")
        return tuple(result)
    if len(names) == 1:
        return (result,)
    raise AsyncLookupError(f"async function returned a {type(result).__name__}; expected a dict, a tuple or None")


class AsyncRunner:
    """Executor side, one per task: drives ``async_fn`` over the task's record batches."""

    def __init__(self, async_fn: AsyncFunction, input_schema: pa.Schema, output_schema: pa.Schema, *,
                 ordered: bool, timeout: float, capacity: int, retries: int, default: Any):
        self.async_fn = async_fn
        self.input_names = input_schema.names
        self.output_names = output_schema.names
        self.output_schema = output_schema
        self.schema = pa.schema(list(input_schema) + list(output_schema))
        self.ordered = ordered
        self.timeout = timeout
        self.capacity = capacity
        self.retries = retries
        self.default = default

    async def _with_retries(self, call) -> tuple[Any, BaseException | None]:
        """Await ``call()`` within the timeout, up to ``1 + retries`` times: ``(result, None)`` on
        success, ``(None, last failure)`` when every attempt failed."""
        failure: BaseException | None = None
        for _ in range(1 + self.retries):
            try:
                return await asyncio.wait_for(call(), self.timeout), None
            except asyncio.TimeoutError:
                failure = TimeoutError(f"no result within {self.timeout:g}s")
            except AsyncLookupError:
                raise
            except Exception as exc:  # noqa: BLE001 - retried, then reported or replaced by the default
                failure = exc
        return None, failure

    async def _call(self, row: dict[str, Any]) -> tuple[Any, ...]:
        result, failure = await self._with_retries(lambda: self.async_fn(row))
        if failure is None:
            return tuple(row[n] for n in self.input_names) + _as_columns(result, self.output_names)
        if self.default is not NO_DEFAULT:
            return tuple(row[n] for n in self.input_names) + _as_columns(self.default, self.output_names)
        raise AsyncLookupError(f"async call failed {1 + self.retries} time(s) (timeout {self.timeout:g}s, "
                               f"retries {self.retries}); last error: {failure!r}. Pass default=... to emit a "
                               f"default row instead") from failure

    def _batch(self, rows: list[tuple[Any, ...]]) -> pa.RecordBatch:
        columns: list[Sequence[Any]] = list(zip(*rows, strict=False)) if rows else [[] for _ in self.schema]
        return pa.RecordBatch.from_arrays([pa.array(list(c), type=f.type) for c, f in zip(columns, self.schema, strict=False)],
                                          schema=self.schema)

    @property
    def batched(self) -> bool:
        return callable(getattr(self.async_fn, "lookup_batch", None))

    def _default_columns(self, rows: int) -> list[pa.Array]:
        values = _as_columns(self.default, self.output_names)
        return [pa.array([v] * rows, type=f.type) for v, f in zip(values, self.output_schema, strict=False)]

    async def _call_group(self, group: pa.RecordBatch) -> pa.RecordBatch:
        # called only when self.batched, i.e. async_fn has a callable lookup_batch
        lookup = cast(BatchedLookup, self.async_fn)
        columns, failure = await self._with_retries(lambda: lookup.lookup_batch(group, self.output_schema))
        if failure is not None:
            if self.default is NO_DEFAULT:
                raise AsyncLookupError(
                    f"async lookup of a group of {group.num_rows} row(s) failed {1 + self.retries} time(s) "
                    f"(timeout {self.timeout:g}s, retries {self.retries}); last error: {failure!r}. Pass "
                    f"default=... to emit default rows instead") from failure
            columns = self._default_columns(group.num_rows)
        if len(columns) != len(self.output_names) or any(len(c) != group.num_rows for c in columns):
            raise AsyncLookupError(f"lookup_batch returned {len(columns)} column(s) of lengths "
                                   f"{[len(c) for c in columns]} for {group.num_rows} row(s) and output columns "
                                   f"{self.output_names}")
        arrays = list(group.columns) + [c.cast(f.type) if c.type != f.type else c
                                        for c, f in zip(columns, self.output_schema, strict=False)]
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)

    @staticmethod
    def _groups(batches: Iterator[pa.RecordBatch], group_rows: int) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for start in range(0, batch.num_rows, group_rows):
                yield batch.slice(start, group_rows)

    @staticmethod
    def _rows(batches: Iterator[pa.RecordBatch]) -> Iterator[dict[str, Any]]:
        for batch in batches:
            yield from batch.to_pylist()

    async def _pipeline(self, units: Iterator[Any], call: Callable[[Any], Awaitable[Any]], limit: int,
                        size: Callable[[Any], int], emit: Callable[[list[Any]], pa.RecordBatch]):
        """Async generator of output batches: ``call(unit)`` for each unit (a row, or a group of
        rows for a batched lookup) with at most ``limit`` calls in flight; results are handed over
        in input order (ordered) or as they finish, and ``emit`` turns about OUTPUT_BATCH_ROWS
        rows of results (``size`` counts them) into one record batch."""
        in_flight: deque[asyncio.Task] = deque()
        ready: list[Any] = []
        ready_rows = 0

        def take(result: Any) -> None:
            nonlocal ready_rows
            ready.append(result)
            ready_rows += size(result)

        async def drain(until: int) -> None:
            while len(in_flight) > until:
                if self.ordered:
                    take(await in_flight.popleft())
                else:
                    done, _ = await asyncio.wait(in_flight, return_when=asyncio.FIRST_COMPLETED)
                    for task in done:
                        in_flight.remove(task)
                        take(task.result())

        try:
            for unit in units:
                await drain(limit - 1)
                in_flight.append(asyncio.ensure_future(call(unit)))
                if self.ordered:  # hand over finished heads without waiting
                    while in_flight and in_flight[0].done():
                        take(in_flight.popleft().result())
                if ready_rows >= OUTPUT_BATCH_ROWS:
                    batch = emit(ready)
                    ready.clear()
                    ready_rows = 0
                    yield batch
            await drain(0)
            if ready:
                yield emit(ready)
        finally:
            for task in in_flight:
                task.cancel()
            # let cancelled calls release their connections before the pool closes; their
            # outcome no longer matters (the task is failing or the consumer stopped reading)
            await asyncio.gather(*in_flight, return_exceptions=True)

    def _output(self, batches: Iterator[pa.RecordBatch]):
        """The pipeline for this function: one call per group of rows when it has
        ``lookup_batch`` (``parallelism`` groups in flight), else one call per row."""
        if self.batched:
            parallelism = max(1, int(getattr(self.async_fn, "parallelism", 1)))
            group_rows = max(1, -(-self.capacity // parallelism))
            return self._pipeline(self._groups(batches, group_rows), self._call_group, parallelism,
                                  size=lambda batch: batch.num_rows, emit=pa.concat_batches)
        return self._pipeline(self._rows(batches), self._call, self.capacity, size=lambda row: 1, emit=self._batch)

    def run(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """The ``mapInArrow`` function body: a private event loop for this task."""
        loop = asyncio.new_event_loop()
        opener = getattr(self.async_fn, "open", None)
        closer = getattr(self.async_fn, "close", None)
        try:
            if opener is not None:
                loop.run_until_complete(opener())
            generator = self._output(batches)
            try:
                while True:
                    try:
                        yield loop.run_until_complete(generator.__anext__())
                    except StopAsyncIteration:
                        break
            finally:
                loop.run_until_complete(generator.aclose())
        finally:
            try:
                if closer is not None:
                    loop.run_until_complete(closer())
            finally:
                loop.close()


def _wait(df, async_fn: AsyncFunction, output_schema, *, ordered: bool, timeout: float, capacity: int,
          retries: int, default: Any):
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import StructField, StructType

    _validate(timeout, capacity, retries)
    if not callable(async_fn):
        raise ConfigError("async_fn", "must be a coroutine function (or an object with an async __call__)")
    clash = set(output_schema.names) & set(df.schema.names)
    if clash:
        raise ConfigError("output_schema", f"column(s) {sorted(clash)} already exist in the DataFrame")
    output_schema = StructType([StructField(f.name, f.dataType, True) for f in output_schema.fields])
    result_schema = StructType(df.schema.fields + output_schema.fields)
    input_arrow = to_arrow_schema(df.schema, timezone="UTC")
    output_arrow = to_arrow_schema(output_schema, timezone="UTC")

    def enrich(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        runner = AsyncRunner(async_fn, input_arrow, output_arrow, ordered=ordered, timeout=timeout,
                             capacity=capacity, retries=retries, default=default)
        return runner.run(batches)

    return df.mapInArrow(enrich, result_schema)


def ordered_wait(df, async_fn: AsyncFunction, output_schema, *, timeout: float = 10.0, capacity: int = 100,
                 retries: int = 0, default: Any = NO_DEFAULT):
    """``df`` plus the columns of ``output_schema`` from ``async_fn``, rows in input order."""
    return _wait(df, async_fn, output_schema, ordered=True, timeout=timeout, capacity=capacity, retries=retries,
                 default=default)


def unordered_wait(df, async_fn: AsyncFunction, output_schema, *, timeout: float = 10.0, capacity: int = 100,
                   retries: int = 0, default: Any = NO_DEFAULT):
    """Like :func:`ordered_wait`, but rows are emitted as their calls complete."""
    return _wait(df, async_fn, output_schema, ordered=False, timeout=timeout, capacity=capacity, retries=retries,
                 default=default)


__all__ = ["AsyncLookupError", "NO_DEFAULT", "ordered_wait", "unordered_wait"]
