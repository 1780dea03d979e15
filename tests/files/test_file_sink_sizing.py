"""Row groups, stripes and blocks sized as Spark sizes them, whatever the size of the Arrow
batches that come in; and the per-task buffer budget with 100 buckets open at once."""

from __future__ import annotations

import fastavro
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.orc as pa_orc
import pyarrow.parquet as pq
import pytest

from sparklink.storage.location import LocalLocation
from sparklink.storage.output import OutputStorage
from sparklink.files.sink.bucket_assigners import ColumnBucketAssigner
from sparklink.files.sink.bucket_writer import FileSinkWriter
from sparklink.files.sink.connector import FileSinkConfig
from sparklink.formats.config import FormatConfig
from sparklink.formats.parquet import dictionary_columns
from sparklink.files.sink.output_file_config import OutputFileConfig
from sparklink.files.sink.rolling_policies import OnCheckpointRollingPolicy
from sparklink.sink.writer import WriterContext
from tests.files.sink_readers import visible_files


def small_batches(count: int, rows: int, *, buckets: int = 1, first: int = 0) -> list[pa.RecordBatch]:
    """``count`` batches of ``rows`` rows from id ``first``: id, a string, a double and a bucket number."""
    batches = []
    for index in range(count):
        ids = np.arange(first + index * rows, first + (index + 1) * rows, dtype=np.int64)
        batches.append(pa.record_batch({"id": ids, "k": pc.cast(pa.array(ids % 97), pa.string()), "v": ids * 0.5,
                                        "bucket": pc.cast(pa.array(ids % buckets), pa.string())}))
    return batches


ARROW_BYTES = sum(b.nbytes for b in small_batches(200, 500))  # 100,000 rows


@pytest.mark.parametrize(("fmt", "size", "check"), [
    # default 128 MiB: 200 batches in, one row group out
    ("parquet", None, lambda path: [g.num_rows for g in _row_groups(path)] == [100_000]),
    # bytes: each row group closes at the first batch that reaches a quarter of the data
    ("parquet", ARROW_BYTES // 4, lambda path: _full_quarters([g.num_rows for g in _row_groups(path)])),
    ("parquet", "30000rows", lambda path: [g.num_rows for g in _row_groups(path)] == [30_000] * 3 + [10_000]),
    # ORC's own writer cuts stripes at the size, however many writes came in
    ("orc", 256 * 1024, lambda path: 1 < pa_orc.ORCFile(path).nstripes < 20),
    # Avro: a block per 64,000 bytes (Avro's sync interval), not per batch
    ("avro", None, lambda path: all(b.size >= 64_000 for b in _avro_blocks(path)[:-1]) and len(_avro_blocks(path)) < 200),
], ids=["parquet-default", "parquet-bytes", "parquet-rows", "orc-stripes", "avro-blocks"])
def test_many_small_batches_make_few_full_row_groups(tmp_path, fmt, size, check):
    rows_mode = isinstance(size, str)
    config = FormatConfig(name=fmt, compression="none" if fmt == "parquet" else ("null" if fmt == "avro" else None),
                          row_group_bytes=None if rows_mode else size, row_group_rows=int(size[:-4]) if rows_mode else None)
    writer = config.bulk_writer(tmp_path / "f", small_batches(1, 1).pop().schema)
    for batch in small_batches(200, 500):
        writer.write_batch(batch)
    writer.close()
    assert check(tmp_path / "f")


def _full_quarters(rows: list[int]) -> bool:
    return len(rows) in (4, 5) and sum(rows) == 100_000 and all(24_500 <= r <= 25_500 for r in rows[:-1])


def _row_groups(path):
    metadata = pq.ParquetFile(path).metadata
    return [metadata.row_group(i) for i in range(metadata.num_row_groups)]


def _avro_blocks(path):
    with open(path, "rb") as handle:
        return list(fastavro.block_reader(handle))


def test_parquet_files_use_dictionaries_where_they_pay_as_parquet_mr(tmp_path):
    batch = small_batches(1, 50_000).pop()
    assert dictionary_columns(pa.Table.from_batches([batch])) == ["k", "bucket"]  # ids and doubles are unique
    writer = FormatConfig(name="parquet").bulk_writer(tmp_path / "f", batch.schema)
    writer.write_batch(batch)
    writer.close()
    chunks = {c.path_in_schema: c for c in (_row_groups(tmp_path / "f")[0].column(i) for i in range(4))}
    assert "RLE_DICTIONARY" in chunks["k"].encodings and chunks["id"].dictionary_page_offset is None


def _writer(tmp_path, budget: int | None) -> FileSinkWriter:
    extra = {"write_buffer_size": budget} if budget else {}
    return FileSinkWriter(output=OutputStorage(location=LocalLocation(path=str(tmp_path))), context=WriterContext(partition_id=0, attempt_number=0, task_attempt_id=0,
                                                               job_id="j", batch_id=None, query_id=None),
                          format_config=FormatConfig(name="parquet", **extra),
                          assigner=ColumnBucketAssigner(column="bucket"), rolling_policy=OnCheckpointRollingPolicy(),
                          output_config=OutputFileConfig(), carried={}, carry=False)


def test_buffer_budget_bounds_memory_with_100_open_buckets(tmp_path):
    budget = 512 * 1024
    writer = _writer(tmp_path / "bounded", budget)
    baseline = pa.total_allocated_bytes()
    peak_buffered = peak_held = 0
    for index in range(40):  # 200,000 rows, 50 rows per bucket per batch, made one at a time
        batch = small_batches(1, 5_000, buckets=100, first=index * 5_000).pop()
        batch_bytes = batch.nbytes
        writer.write_batch(batch)
        del batch
        peak_buffered = max(peak_buffered, writer.buffered_bytes())
        peak_held = max(peak_held, pa.total_allocated_bytes() - baseline)
    assert len(writer.open) == 100
    assert peak_buffered <= budget
    # Arrow memory the writer really holds: the budget, plus pyarrow's file writers (about 26 KiB
    # each for this schema once a row group is written) and one batch
    assert peak_held <= budget + 100 * 32 * 1024 + batch_bytes, f"writer held {peak_held} bytes, budget {budget}"
    writer.flush()
    writer.prepare_commit()
    files = [part.path for part in writer.done]
    groups = [pq.ParquetFile(f).metadata.num_row_groups for f in files]
    assert len(files) == 100 and min(groups) > 1  # the budget cut row groups early
    ids = pa.concat_arrays([pq.read_table(f).column("id").combine_chunks() for f in files])
    assert sorted(ids.to_pylist()) == list(range(200_000))

    unbounded = _writer(tmp_path / "default", None)  # 256 MiB: nothing is cut early
    for batch in small_batches(40, 5_000, buckets=100):
        unbounded.write_batch(batch)
    unbounded.flush()
    assert {pq.ParquetFile(p.path).metadata.num_row_groups for p in unbounded.done} == {1}


def test_spark_batches_of_100_rows_become_full_row_groups(spark, tmp_path):
    """Spark hands the writer batches of maxRecordsPerBatch rows; the files do not show it."""
    key = "spark.sql.execution.arrow.maxRecordsPerBatch"
    previous = spark.conf.get(key)
    spark.conf.set(key, "100")
    try:
        (spark.range(0, 10_000, numPartitions=2).selectExpr("id", "CAST(id % 7 AS STRING) AS k")
         .write.format("sparklink.files").option("path", str(tmp_path / "out")).option("format", "parquet")
         .option("bucketAssigner", "basepath").save())
    finally:
        spark.conf.set(key, previous)
    files = visible_files(tmp_path / "out")
    assert len(files) == 2 and all([g.num_rows for g in _row_groups(f)] == [5_000] for f in files)


@pytest.mark.parametrize(("value", "expected"), [
    (None, (None, None)), ("64MB", (64 << 20, None)), ("1000000", (1_000_000, None)),
    ("4000rows", (None, 4000)), ("1 row", (None, 1)),
], ids=["default", "unit", "bare-bytes", "rows", "one-row"])
def test_row_group_size_option_takes_bytes_or_rows(value, expected):
    options = {"path": "/o", "format": "parquet", **({"rowGroupSize": value} if value else {})}
    config = FileSinkConfig.from_options(options).format
    assert (config.row_group_bytes, config.row_group_rows) == expected
    assert config.block_bytes == (expected[0] or (None if expected[1] else 128 << 20))
    assert FileSinkConfig.from_options({**options, **config.to_options()}).format == config
