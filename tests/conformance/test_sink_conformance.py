"""The project's sinks through the published conformance suite (sparklink.testing.conformance),
each configuration a subclass, exactly as a user tests a sink of their own.

Here every sink goes through the protocol points all sinks share; connector-specific fault
points (``filesink.*``, ``compaction.*``, ``postgres.*``) are exercised in the connectors' own
suites (tests/files, tests/postgres). The example directory sink runs the same suite from
outside this folder: examples/conformance/.
"""

from __future__ import annotations

import itertools
import os

import pytest
from psycopg import sql

from sparklink.files.sink.connector import FileSinkConnector
from sparklink.postgres.connector import PostgresSinkConnector
from sparklink.testing.conformance import (SinkConformance, hidden_data_files, plain_reader_ids,
                                           plain_reader_json_ids)

_table_numbers = itertools.count()


FILE_SINK_POINTS = ("filesink.writer.before_commit", "filesink.before_state", "filesink.after_state",
                    "filesink.after_first_rename", "filesink.after_renames", "filesink.after_spark_log")
COMPACTION_POINTS = ("compaction.before_write", "compaction.after_write", "compaction.after_rename",
                     "compaction.after_remove")


class FileSinkCase(SinkConformance):
    format = "sparklink.files"
    sink_factory = FileSinkConnector
    connector_points = FILE_SINK_POINTS
    sigkill_points = ()  # the file sink's real SIGKILL sequences: tests/files/test_file_sink_exactly_once.py
    task_failure_points = ("writer.after_write", "filesink.writer.before_commit")

    def read_ids(self, options):
        return plain_reader_ids(options["path"])

    def leftovers(self, options):
        return hidden_data_files(options["path"])


class TestFileSinkParquet(FileSinkCase):
    @pytest.fixture
    def sink_options(self, tmp_path):
        return {"path": str(tmp_path / "out"), "format": "parquet", "bucketAssigner": "basepath"}


class TestFileSinkJsonRolling(FileSinkCase):
    """Rows are appended to in-progress files and rolled at the commit; carrying files across
    batches (data not visible until a later roll) is covered by tests/files."""

    @pytest.fixture
    def sink_options(self, tmp_path):
        return {"path": str(tmp_path / "out"), "format": "json", "bucketAssigner": "basepath",
                "rollingPolicy": "default", "maxPartSize": "2KB", "rolloverInterval": "0s"}

    def read_ids(self, options):
        return plain_reader_json_ids(options["path"])


class TestFileSinkJsonCarried(FileSinkCase):
    """A row format whose in-progress files are carried across micro-batches (the hardest case:
    a replay must cut a carried file back to its committed length); the finishing run rolls
    every file so that all rows are visible."""

    @pytest.fixture
    def sink_options(self, tmp_path):
        return {"path": str(tmp_path / "out"), "format": "json", "bucketAssigner": "column", "bucketColumn": "split",
                "rollingPolicy": "default", "maxPartSize": "3KB", "rolloverInterval": "1h",
                "inactivityInterval": "1h"}

    # micro-batches of the simulated crashes are too small to roll a file before the finishing one
    connector_points = tuple(p for p in FILE_SINK_POINTS if p != "filesink.after_first_rename")

    def finishing_options(self, options):
        return dict(options, rolloverInterval="0s")

    def read_ids(self, options):
        return plain_reader_json_ids(options["path"])


class TestFileSinkCompaction(FileSinkCase):
    # every file goes through compaction: no part file is renamed on its own (no first rename)
    connector_points = tuple(p for p in FILE_SINK_POINTS if p != "filesink.after_first_rename") + COMPACTION_POINTS
    @pytest.fixture
    def sink_options(self, tmp_path):
        return {"path": str(tmp_path / "out"), "format": "parquet", "bucketAssigner": "basepath",
                "compaction.everyNCheckpoints": "1"}  # every batch's files compacted into one before commit


class PostgresCase(SinkConformance):
    format = "sparklink.postgres"
    sink_factory = PostgresSinkConnector
    refuses_second_query = False  # several queries may write one table (documented in docs/postgres.md)
    semantic = ""

    @pytest.fixture
    def sink_options(self, tmp_path, postgres):
        table = f"conformance_{self.semantic.replace('-', '_')}_{os.getpid()}_{next(_table_numbers)}"
        options = {"dsn": postgres.dsn, "table": table, "semantic": self.semantic,
                   "checkpointLocation": str(tmp_path / "ck")}
        if self.semantic == "upsert":
            options["keyColumns"] = "id"
        return options

    def read_ids(self, options):
        import psycopg

        with psycopg.connect(options["dsn"]) as conn:
            try:
                rows = conn.execute(sql.SQL("SELECT id FROM {}").format(sql.Identifier(options["table"]))).fetchall()
            except psycopg.errors.UndefinedTable:
                return []
        return sorted(r[0] for r in rows)

    def leftovers(self, options):
        import psycopg

        with psycopg.connect(options["dsn"]) as conn:
            return [r[0] for r in conn.execute("SELECT gid FROM pg_prepared_xacts").fetchall()]


class TestPostgresUpsert(PostgresCase):
    semantic = "upsert"  # no point of its own; the real SIGKILL of this semantic runs here
    # one kill, where a replay matters most for an idempotent write (the batch is logged, the
    # rows may or may not be in; the restart rewrites them by key); every other point is
    # crashed at by simulation, and PostgreSQL's multi-kill sequences are the two-phase and
    # write-ahead ones (tests/postgres/test_exactly_once.py)
    sigkill_points = ("sink.after_log",)


class TestPostgresTwoPhase(PostgresCase):
    semantic = "two-phase"
    connector_points = ("postgres.after_prepare", "postgres.between_commit_prepared")
    task_failure_points = ("writer.after_write", "postgres.after_prepare")
    sigkill_points = ()  # its real SIGKILL sequence: tests/postgres/test_exactly_once.py


class TestPostgresWriteAhead(PostgresCase):
    semantic = "write-ahead"
    connector_points = ("postgres.before_wal_commit",)
    sigkill_points = ()  # its real SIGKILL sequence: tests/postgres/test_exactly_once.py
