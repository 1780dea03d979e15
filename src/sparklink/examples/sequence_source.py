"""A sequence source: ``numSplits`` splits of ``rowsPerSplit`` rows each (an SDK example).

Split ``s`` holds the ids ``s, s + numSplits, s + 2 * numSplits, ...`` so the union of all
splits is ``0 .. numSplits * rowsPerSplit - 1``, each id once. The offset records how many
rows of each split have been admitted: ``{"positions": [p0, p1, ...]}``.
With ``rowsPerSecond`` the rows become available over time (an unbounded-looking stream);
without it everything is available at once.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping

import pyarrow as pa
from pyspark.sql.types import IntegerType, LongType, StructField, StructType

from sparklink.arrow_arrays import repeated
from sparklink.options import Option, OptionTable, integer
from sparklink.source import READ_ALL, Boundedness, Offset, ReadLimit, Source, SourceReader, Split, SplitEnumerator


class SequenceOptions(OptionTable):
    """The example source's options (a connector declares its options once, as here)."""

    ignored = ("path",)
    num_splits = Option("numSplits", integer(1), default=2, doc="how many splits")
    rows_per_split = Option("rowsPerSplit", integer(0), default=1000, doc="rows in each split")
    max_rows_per_trigger = Option("maxRowsPerTrigger", integer(1), default_doc="no limit",
                                  doc="at most this many rows per micro-batch")
    rows_per_second = Option("rowsPerSecond", integer(1), default_doc="all at once",
                             doc="rows become available at this rate")
    batch_size = Option("batchSize", integer(1), default=8192, doc="rows per Arrow record batch")


SCHEMA = StructType([StructField("id", LongType()), StructField("split", IntegerType())])


class SequenceEnumerator(SplitEnumerator):
    """Driver side: admits rows split by split, within the read limit."""

    def __init__(self, num_splits: int, rows_per_split: int, rows_per_second: int | None):
        self.num_splits = num_splits
        self.rows_per_split = rows_per_split
        self.rows_per_second = rows_per_second
        self.started_at = time.time()

    def initial_offset(self) -> Offset:
        return {"positions": [0] * self.num_splits}

    def _available_per_split(self) -> int:
        if self.rows_per_second is None:
            return self.rows_per_split
        produced = int((time.time() - self.started_at) * self.rows_per_second) // self.num_splits
        return min(self.rows_per_split, produced)

    def latest_offset(self, start: Offset, limit: ReadLimit) -> Offset:
        available = self._available_per_split()
        ceiling = limit.until["positions"] if limit.until else [available] * self.num_splits
        positions = list(start["positions"])
        budget = limit.max_rows if limit.max_rows is not None else None
        # admit round-robin, one slice per split, until the budget is spent
        progressed = True
        while progressed and (budget is None or budget > 0):
            progressed = False
            for index in range(self.num_splits):
                room = min(available, ceiling[index]) - positions[index]
                if room <= 0:
                    continue
                take = room if budget is None else min(room, max(1, budget // self.num_splits), budget)
                positions[index] += take
                progressed = True
                if budget is not None:
                    budget -= take
                    if budget <= 0:
                        break
        return {"positions": positions}

    def available_now_offset(self, start: Offset | None) -> Offset:
        return self.latest_offset(start or self.initial_offset(), READ_ALL)

    def plan_splits(self, start: Offset, end: Offset) -> list[Split]:
        return [
            Split(split_id=f"seq-{index}", state={"split": index, "from": begin, "to": stop})
            for index, (begin, stop) in enumerate(zip(start["positions"], end["positions"], strict=False))
            if stop > begin
        ]

    def supported_limits(self) -> frozenset[str]:
        return frozenset({"max_rows"})


class SequenceReader(SourceReader):
    """Executor side: yields the ids of one split's range as Arrow record batches."""

    def __init__(self, num_splits: int, batch_size: int):
        self.num_splits = num_splits
        self.batch_size = batch_size

    def read(self, split: Split) -> Iterator[pa.RecordBatch]:
        index, begin, stop = split.state["split"], split.state["from"], split.state["to"]
        for low in range(begin, stop, self.batch_size):
            high = min(stop, low + self.batch_size)
            ids = pa.array(range(low * self.num_splits + index, high * self.num_splits + index, self.num_splits),
                           type=pa.int64())
            yield pa.RecordBatch.from_arrays([ids, repeated(index, pa.int32(), len(ids))],
                                             names=["id", "split"])


class SequenceSource(Source):
    """The source: validates options on the driver and builds enumerator and readers."""

    def __init__(self, options: Mapping[str, str] | None = None):
        super().__init__(options)
        o = SequenceOptions
        opts = o.options(options)
        self.num_splits = o.num_splits.value(opts)
        self.rows_per_split = o.rows_per_split.value(opts)
        max_rows = o.max_rows_per_trigger.raw(opts)
        self.max_rows_per_trigger = o.max_rows_per_trigger.parse(max_rows) if max_rows else None
        rate = o.rows_per_second.raw(opts)
        self.rows_per_second = o.rows_per_second.parse(rate) if rate else None
        self.batch_size = o.batch_size.value(opts)

    @property
    def boundedness(self) -> Boundedness:
        return Boundedness.CONTINUOUS_UNBOUNDED

    def schema(self) -> StructType:
        return SCHEMA

    def create_enumerator(self, *, streaming: bool) -> SequenceEnumerator:
        return SequenceEnumerator(self.num_splits, self.rows_per_split, self.rows_per_second if streaming else None)

    def create_reader(self, schema: StructType) -> SequenceReader:
        return SequenceReader(self.num_splits, self.batch_size)

    def default_read_limit(self) -> ReadLimit:
        return ReadLimit(max_rows=self.max_rows_per_trigger) if self.max_rows_per_trigger else READ_ALL
