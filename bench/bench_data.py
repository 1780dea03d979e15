"""The benchmarks' data shapes, defined once for every benchmark in ``bench/``.

  simple  ``id`` long, a low-cardinality string, ``id * 0.5`` (the rows of the first version of
          the benchmarks: small, very compressible output);
  users   ``id``, ``k`` a high-cardinality string (about one distinct value per row), ``v``
          random doubles, ``amount`` decimal(12,2), ``event_time`` a random timestamp within one
          day; ``k``, ``v`` and ``amount`` are null in about 3 % of the rows each.

Two ways to make them: :func:`write_input` has Spark write the rows as Parquet (the input of
the sink benchmarks, read back by Spark's native Parquet source so that the sink is the
bottleneck); :func:`make_table` builds them with pyarrow (the files the source benchmarks read,
and the batches of the Spark-free upload benchmark). The sink shapes bucket on ``event_time``
(the simple shape's ``k`` has 97 values); the source shapes' ``simple`` string is ``name`` with
1,000 values, as the first source benchmark had.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

SHAPES = ("simple", "users")
DAY_START = 1_700_006_400  # 2023-11-15 00:00:00 UTC
NULL_SHARE = 0.03

# the Spark schema of make_table's rows, for the readers that need one (CSV)
SCHEMAS = {"simple": "id long, name string, score double",
           "users": "id long, k string, v double, amount decimal(12,2), event_time timestamp"}


def check_shapes(text: str) -> list[str]:
    """The comma-separated shapes of a ``--shapes`` argument; an unknown one is a ValueError."""
    shapes = [shape.strip() for shape in text.split(",") if shape.strip()]
    unknown = [shape for shape in shapes if shape not in SHAPES]
    if unknown:
        raise ValueError(f"unknown shape(s) {', '.join(unknown)}; known: {', '.join(SHAPES)}")
    return shapes


def spark_columns(shape: str) -> list[str]:
    """The SQL expressions over ``spark.range``'s ``id`` that make one shape's rows."""
    if shape == "simple":
        return ["id", "CAST(id % 97 AS STRING) AS k", "id * 0.5 AS v",
                f"timestamp_seconds({DAY_START} + (id * 7919) % 86400) AS event_time"]
    return ["id",
            f"CASE WHEN rand(1) < {NULL_SHARE} THEN NULL ELSE concat('user-', sha2(CAST(id AS STRING), 256)) END AS k",
            f"CASE WHEN rand(2) < {NULL_SHARE} THEN NULL ELSE rand(3) * 1000000 END AS v",
            f"CASE WHEN rand(4) < {NULL_SHARE} THEN NULL ELSE CAST(rand(5) * 100000 AS DECIMAL(12, 2)) END AS amount",
            f"timestamp_micros(CAST(({DAY_START} + rand(6) * 86400) * 1000000 AS BIGINT)) AS event_time"]


def write_input(spark, rows: int, path: Path, shape: str, *, files: int = 2) -> None:
    """``rows`` rows of ``shape`` written by Spark as Parquet to ``path`` (``files`` files)."""
    spark.range(rows, numPartitions=files).selectExpr(*spark_columns(shape)).write.mode("overwrite").parquet(str(path))


def make_table(shape: str, rows: int, *, first_id: int = 0, seed: int = 7) -> pa.Table:
    """``rows`` rows of ``shape`` built by pyarrow (deterministic for a seed), ids from ``first_id``."""
    ids = np.arange(first_id, first_id + rows, dtype=np.int64)
    if shape == "simple":
        names = pc.binary_join_element_wise("name-", pc.cast(pa.array(ids % 1000), pa.string()), "")
        return pa.table({"id": ids, "name": names, "score": ids * 0.5})
    rng = np.random.default_rng(seed)

    def nulls() -> pa.Array:
        return pa.array(rng.random(rows) < NULL_SHARE)

    keys = pc.binary_join_element_wise("user-", pc.cast(pa.array(rng.integers(0, 1 << 62, rows)), pa.string()),
                                       pc.cast(pa.array(ids), pa.string()), "-")
    amounts = pa.array(rng.integers(0, 10_000_000, rows) / 100).cast(pa.decimal128(12, 2))
    micros = (DAY_START + rng.random(rows) * 86_400) * 1_000_000
    return pa.table({
        "id": ids,
        "k": pc.if_else(nulls(), pa.scalar(None, pa.string()), keys),
        "v": pa.array(rng.random(rows) * 1_000_000, mask=nulls().to_numpy(zero_copy_only=False)),
        "amount": pc.if_else(nulls(), pa.scalar(None, pa.decimal128(12, 2)), amounts),
        "event_time": pa.array(micros.astype(np.int64), pa.timestamp("us", tz="UTC")),
    })


def csv_ready(table: pa.Table) -> pa.Table:
    """Timestamps as ISO-8601 text with a 'T' and 'Z', which Spark's and sparklink's CSV readers parse."""
    columns = []
    for field, column in zip(table.schema, table.columns, strict=True):
        if pa.types.is_timestamp(field.type):
            text = pc.cast(column.cast(pa.timestamp("us")), pa.string())
            column = pc.binary_join_element_wise(pc.replace_substring(text, " ", "T", max_replacements=1), "Z", "")
        columns.append(column)
    return pa.table(columns, names=table.column_names)


def make_files(root: Path, shape: str, large_rows: int, small_files: int, small_rows: int) -> dict[str, Path]:
    """The source benchmarks' inputs of one shape under ``root``: per case (``parquet-large``,
    ``parquet-small``, ``csv-large``, ``csv-small``) a directory holding one large file of
    ``large_rows`` rows (Parquet row groups of 256,000 rows) or ``small_files`` files of
    ``small_rows`` rows. CSV files have no header (read with :data:`SCHEMAS`)."""
    table = make_table(shape, large_rows)
    piece = table.slice(0, small_rows)
    paths = {}
    for kind in ("parquet", "csv"):
        large, small = root / f"{shape}-{kind}-large", root / f"{shape}-{kind}-small"
        large.mkdir()
        small.mkdir()
        if kind == "parquet":
            pq.write_table(table, large / "big.parquet", row_group_size=256_000)
            for i in range(small_files):
                pq.write_table(piece, small / f"f{i:06d}.parquet")
        else:
            options = pacsv.WriteOptions(include_header=False)
            pacsv.write_csv(csv_ready(table), large / "big.csv", options)
            csv_piece = csv_ready(piece)
            for i in range(small_files):
                pacsv.write_csv(csv_piece, small / f"f{i:06d}.csv", options)
        paths[f"{kind}-large"], paths[f"{kind}-small"] = large, small
    return paths
