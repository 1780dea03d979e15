"""A connector written with the sparklink SDK, end to end (run: .venv/bin/python examples/sdk_quickstart.py).

A bounded-or-streaming source of countdown rows, and the example directory sink, which is
exactly-once: kill this script at any moment and run it again, and every row is still there
exactly once.
"""

import os
import sys
import tempfile

import pyarrow as pa
import pyarrow.dataset as ds
from pyspark.sql.types import LongType, StructField, StructType

from sparklink.source import Source, SourceReader, Split, SplitEnumerator
from sparklink.spark import as_data_source, register_data_source
from sparklink.testing import spark_session

SCHEMA = StructType([StructField("n", LongType())])


class CountdownEnumerator(SplitEnumerator):
    """Driver side: the offset is how many rows were admitted; one split per micro-batch."""

    def __init__(self, total):
        self.total = total

    def initial_offset(self):
        return {"next": 0}

    def latest_offset(self, start, limit):
        end = self.total if limit.max_rows is None else min(self.total, start["next"] + limit.max_rows)
        if limit.until is not None:
            end = min(end, limit.until["next"])
        return {"next": end}

    def plan_splits(self, start, end):
        if end["next"] <= start["next"]:
            return []
        return [Split(split_id=f"{start['next']}-{end['next']}", state={"from": start["next"], "to": end["next"]})]


class CountdownReader(SourceReader):
    """Executor side: yields one Arrow record batch per split."""

    def read(self, split):
        yield pa.RecordBatch.from_pydict({"n": pa.array(range(split.state["from"], split.state["to"]), pa.int64())})


class CountdownSource(Source):
    def schema(self):
        return SCHEMA

    def create_enumerator(self, *, streaming):
        return CountdownEnumerator(int(self.options.get("total", "1000")))

    def create_reader(self, schema):
        return CountdownReader()


if __name__ == "__main__":
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = spark_session(app_name="sdk-quickstart")
    register_data_source(spark, as_data_source(CountdownSource, "countdown"))
    work = tempfile.mkdtemp(prefix="sparklink-quickstart-")
    (spark.readStream.format("countdown").option("total", 5000).load()
     .writeStream.format("sparklink.directory").option("path", f"{work}/out")
     .option("checkpointLocation", f"{work}/checkpoint").trigger(availableNow=True).start().awaitTermination())
    rows = ds.dataset(f"{work}/out", format="parquet").to_table()
    print(f"{rows.num_rows} rows, {len(set(rows.column('n').to_pylist()))} distinct, in {work}/out")
    spark.stop()
