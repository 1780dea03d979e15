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

from sparklink.options import Options, parse_int
from sparklink.source import READ_ALL, Boundedness, Offset, ReadLimit, Source, SourceReader, Split, SplitEnumerator

OPTION_NUM_SPLITS = "numSplits"
OPTION_ROWS_PER_SPLIT = "rowsPerSplit"
OPTION_MAX_ROWS_PER_TRIGGER = "maxRowsPerTrigger"
OPTION_ROWS_PER_SECOND = "rowsPerSecond"
OPTION_BATCH_SIZE = "batchSize"
KNOWN_OPTIONS = (OPTION_NUM_SPLITS, OPTION_ROWS_PER_SPLIT, OPTION_MAX_ROWS_PER_TRIGGER, OPTION_ROWS_PER_SECOND,
                 OPTION_BATCH_SIZE, "path")

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
            yield pa.RecordBatch.from_arrays([ids, pa.array([index] * len(ids), type=pa.int32())],
                                             names=["id", "split"])


class SequenceSource(Source):
    """The source: validates options on the driver and builds enumerator and readers."""

    def __init__(self, options: Mapping[str, str] | None = None):
        super().__init__(options)
        opts = Options(options)
        opts.reject_unknown(KNOWN_OPTIONS)
        self.num_splits = parse_int(OPTION_NUM_SPLITS, opts.get(OPTION_NUM_SPLITS, "2"), minimum=1)
        self.rows_per_split = parse_int(OPTION_ROWS_PER_SPLIT, opts.get(OPTION_ROWS_PER_SPLIT, "1000"), minimum=0)
        max_rows = opts.get(OPTION_MAX_ROWS_PER_TRIGGER)
        self.max_rows_per_trigger = parse_int(OPTION_MAX_ROWS_PER_TRIGGER, max_rows, minimum=1) if max_rows else None
        rate = opts.get(OPTION_ROWS_PER_SECOND)
        self.rows_per_second = parse_int(OPTION_ROWS_PER_SECOND, rate, minimum=1) if rate else None
        self.batch_size = parse_int(OPTION_BATCH_SIZE, opts.get(OPTION_BATCH_SIZE, "8192"), minimum=1)

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
