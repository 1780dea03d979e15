"""The connectors under conformance test, each described the same way.

A :class:`SinkCase` knows how to point the conformance job at a fresh output, how a plain
reader sees that output (the list of ids), and what "nothing partial left behind" means for it
(no hidden file with data in a file sink, no prepared transaction in PostgreSQL).
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pyarrow.dataset as ds
from pyspark.sql.types import IntegerType, LongType, StructField, StructType

from sparklink.sink import Sink

SEQUENCE_SCHEMA = StructType([StructField("id", LongType()), StructField("split", IntegerType())])
_table_numbers = itertools.count()


def plain_reader_ids(root: Path) -> list[int]:
    """Ids as Spark, pandas or pyarrow see them: names starting with '.' or '_' skipped."""
    if not root.exists():
        return []
    dataset = ds.dataset(str(root), format="parquet", ignore_prefixes=[".", "_"])
    if not dataset.files:
        return []
    return sorted(dataset.to_table(columns=["id"]).column("id").to_pylist())


def hidden_data_files(root: Path) -> list[str]:
    """Staged / in-progress files left with data (the sink's own metadata excluded)."""
    leftovers = []
    for directory, subdirs, files in os.walk(root):
        subdirs[:] = [d for d in subdirs if d != "_sparklink"]
        in_staging = "_staging" in Path(directory).parts
        leftovers.extend(str(Path(directory, f)) for f in files
                         if (f.startswith(".") or in_staging) and os.path.getsize(Path(directory, f)) > 0)
    return leftovers


@dataclass
class SinkCase:
    name: str
    fmt: str
    options: Callable[[Path, object], dict]       # (tmp_path, postgres or None) -> options
    read_ids: Callable[[dict, object], list[int]]  # (options, postgres) -> ids a reader sees
    leftovers: Callable[[dict, object], list[str]]  # (options, postgres) -> partial state left
    make_sink: Callable[[dict], Sink]              # options -> a sink object built as Spark would
    needs_postgres: bool = False
    refuses_second_query: bool = True


# ---------------------------------------------------------------- file-based sinks


def _directory_options(tmp: Path, _pg) -> dict:
    return {"path": str(tmp / "out")}


def _files_parquet_options(tmp: Path, _pg) -> dict:
    return {"path": str(tmp / "out"), "format": "parquet", "bucketAssigner": "basepath"}


def _files_json_options(tmp: Path, _pg) -> dict:
    # rows are appended to in-progress files and rolled at the commit; carrying files across
    # batches (data not visible until a later roll) is covered by tests/files
    return {"path": str(tmp / "out"), "format": "json", "bucketAssigner": "basepath", "rollingPolicy": "default",
            "maxPartSize": "2KB", "rolloverInterval": "0s"}


def _files_compacting_options(tmp: Path, _pg) -> dict:
    return {"path": str(tmp / "out"), "format": "parquet", "bucketAssigner": "basepath",
            "compaction.everyNCheckpoints": "1"}  # every batch's files compacted into one before commit


def _json_ids(options: dict, _pg) -> list[int]:
    import json

    root = Path(options["path"])
    ids = []
    for directory, subdirs, files in os.walk(root):
        subdirs[:] = [d for d in subdirs if not d.startswith((".", "_"))]
        for name in files:
            if not name.startswith((".", "_")):
                with open(Path(directory, name), encoding="utf-8") as handle:
                    ids.extend(json.loads(line)["id"] for line in handle if line.strip())
    return sorted(ids)


def _parquet_ids(options: dict, _pg) -> list[int]:
    return plain_reader_ids(Path(options["path"]))


def _file_leftovers(options: dict, _pg) -> list[str]:
    return hidden_data_files(Path(options["path"]))


def _directory_sink(options: dict) -> Sink:
    from sparklink.examples.directory_sink import DirectorySink

    return DirectorySink(options, SEQUENCE_SCHEMA)


def _file_sink(options: dict) -> Sink:
    from sparklink.files.sink.connector import FileSinkConnector

    return FileSinkConnector(options, SEQUENCE_SCHEMA)


# ---------------------------------------------------------------- PostgreSQL sinks


def _pg_options(semantic: str) -> Callable[[Path, object], dict]:
    def options(tmp: Path, pg) -> dict:
        table = f"conformance_{semantic.replace('-', '_')}_{os.getpid()}_{next(_table_numbers)}"
        opts = {"dsn": pg.dsn, "table": table, "semantic": semantic, "checkpointLocation": str(tmp / "ck")}
        if semantic == "upsert":
            opts["keyColumns"] = "id"
        return opts
    return options


def _pg_ids(options: dict, pg) -> list[int]:
    import psycopg
    from psycopg import sql

    with pg.connect() as conn:
        try:
            rows = conn.execute(sql.SQL("SELECT id FROM {}").format(sql.Identifier(options["table"]))).fetchall()
        except psycopg.errors.UndefinedTable:
            return []
    return sorted(r[0] for r in rows)


def _pg_leftovers(options: dict, pg) -> list[str]:
    with pg.connect() as conn:
        return [r[0] for r in conn.execute("SELECT gid FROM pg_prepared_xacts").fetchall()]


def _pg_sink(options: dict) -> Sink:
    from sparklink.postgres.connector import PostgresSinkConnector

    return PostgresSinkConnector(options, SEQUENCE_SCHEMA)


SINK_CASES = [
    SinkCase("directory", "sparklink.directory", _directory_options, _parquet_ids, _file_leftovers, _directory_sink),
    SinkCase("files-parquet", "sparklink.files", _files_parquet_options, _parquet_ids, _file_leftovers, _file_sink),
    SinkCase("files-json-rolling", "sparklink.files", _files_json_options, _json_ids, _file_leftovers, _file_sink),
    SinkCase("files-compaction", "sparklink.files", _files_compacting_options, _parquet_ids, _file_leftovers,
             _file_sink),
    SinkCase("postgres-upsert", "sparklink.postgres", _pg_options("upsert"), _pg_ids, _pg_leftovers, _pg_sink,
             needs_postgres=True, refuses_second_query=False),
    SinkCase("postgres-two-phase", "sparklink.postgres", _pg_options("two-phase"), _pg_ids, _pg_leftovers, _pg_sink,
             needs_postgres=True, refuses_second_query=False),
    SinkCase("postgres-write-ahead", "sparklink.postgres", _pg_options("write-ahead"), _pg_ids, _pg_leftovers,
             _pg_sink, needs_postgres=True, refuses_second_query=False),
]
