"""A plain reader for the file sink's tests: lists finished files the way Spark, pandas,
pyarrow and Hive do (skipping names that start with '.' or '_') and reads every record."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.orc as pa_orc
import pyarrow.parquet as pq


def visible_files(root: str | Path) -> list[Path]:
    found = []
    for directory, subdirs, files in os.walk(root):
        subdirs[:] = sorted(d for d in subdirs if not d.startswith((".", "_")))
        found.extend(Path(directory, f) for f in sorted(files) if not f.startswith((".", "_")))
    return found


def hidden_files(root: str | Path) -> list[Path]:
    found = []
    for directory, subdirs, files in os.walk(root):
        subdirs[:] = [d for d in subdirs if d != "_sparklink"]
        found.extend(Path(directory, f) for f in files if f.startswith("."))
    return found


def read_records(path: Path, fmt: str, *, header: bool = False) -> list[dict]:
    if fmt == "parquet":
        return pq.read_table(path).to_pylist()
    if fmt == "orc":
        return pa_orc.read_table(path).to_pylist()
    if fmt == "avro":
        import fastavro

        with open(path, "rb") as handle:
            return list(fastavro.reader(handle))
    if fmt == "json":
        return [json.loads(line) for line in path.read_text().splitlines()]
    if fmt == "text":
        return [{"label": line} for line in path.read_text().split("\n")[:-1]]
    if fmt == "csv":
        if not header:
            table = pa_csv.read_csv(path, pa_csv.ReadOptions(autogenerate_column_names=True))
            return [{"id": row["f0"]} for row in table.to_pylist()]
        return pa_csv.read_csv(path).to_pylist()
    raise ValueError(fmt)


def read_ids(root: str | Path, fmt: str, *, header: bool = False) -> list[int]:
    ids = []
    for path in visible_files(root):
        for record in read_records(path, fmt, header=header):
            ids.append(int(record["label"][4:]) if fmt == "text" else int(record["id"]))
    return sorted(ids)


def assert_exactly_once(root: str | Path, fmt: str, expected: int, *, header: bool = False) -> None:
    ids = read_ids(root, fmt, header=header)
    duplicates = len(ids) - len(set(ids))
    missing = set(range(expected)) - set(ids)
    assert duplicates == 0 and not missing and len(ids) == expected, (
        f"{len(ids)} records, {duplicates} duplicates, {len(missing)} missing (e.g. {sorted(missing)[:5]})")


def table_of(records: list[dict]) -> pa.Table:
    return pa.Table.from_pylist(records)
