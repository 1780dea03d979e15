"""How a plain reader sees a file output, and what partial state it must not see (test side)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow.dataset as ds
from pyspark.sql.types import IntegerType, LongType, StructField, StructType

# What the conformance jobs write: the sequence source's rows (ids 0 .. n-1, each once).
SEQUENCE_SCHEMA = StructType([StructField("id", LongType()), StructField("split", IntegerType())])


def plain_reader_ids(root: str | os.PathLike[str]) -> list[int]:
    """Ids in Parquet files as Spark, pandas or pyarrow see them: names starting with '.' or
    '_' skipped."""
    root = Path(root)
    if not root.exists():
        return []
    dataset = ds.dataset(str(root), format="parquet", ignore_prefixes=[".", "_"])
    if not dataset.files:
        return []
    return sorted(dataset.to_table(columns=["id"]).column("id").to_pylist())


def plain_reader_json_ids(root: str | os.PathLike[str]) -> list[int]:
    """Ids in JSON-lines files a plain reader sees (names starting with '.' or '_' skipped)."""
    ids: list[int] = []
    for directory, subdirs, files in os.walk(root):
        subdirs[:] = [d for d in subdirs if not d.startswith((".", "_"))]
        for name in files:
            if not name.startswith((".", "_")):
                with open(Path(directory, name), encoding="utf-8") as handle:
                    ids.extend(json.loads(line)["id"] for line in handle if line.strip())
    return sorted(ids)


def hidden_data_files(root: str | os.PathLike[str]) -> list[str]:
    """Staged / in-progress files left with data (the sink's own ``_sparklink`` metadata excluded)."""
    leftovers: list[str] = []
    for directory, subdirs, files in os.walk(root):
        subdirs[:] = [d for d in subdirs if d != "_sparklink"]
        in_staging = "_staging" in Path(directory).parts
        leftovers.extend(str(Path(directory, f)) for f in files
                         if (f.startswith(".") or in_staging) and os.path.getsize(Path(directory, f)) > 0)
    return leftovers
