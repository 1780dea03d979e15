"""The conformance suite for sources: each source streams into the exactly-once directory sink;
the driver is SIGKILLed mid-query (and, separately, every first task attempt fails), the query
restarts from its checkpoint, and every input record must arrive exactly once."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conformance.cases import plain_reader_ids

JOB = "tests.conformance.jobs:source_to_directory"
ROWS = 300
_tables = itertools.count()


@dataclass
class SourceCase:
    name: str
    fmt: str
    prepare: Callable[[Path, object], tuple[dict, str | None]]  # (tmp, pg) -> (options, schema DDL)
    needs_postgres: bool = False


def _sequence(tmp: Path, _pg):
    return {"numSplits": 3, "rowsPerSplit": ROWS // 3, "maxRowsPerTrigger": 100}, None


def _files(tmp: Path, _pg):
    landing = tmp / "landing"
    landing.mkdir()
    for index in range(6):  # six files of 50 JSON lines, three per trigger
        lines = [json.dumps({"id": index * 50 + row, "split": index}) for row in range(50)]
        (landing / f"part-{index}.json").write_text("\n".join(lines) + "\n")
    return {"path": str(landing), "format": "json", "maxFilesPerTrigger": 2, "minFileAge": "0s"}, "id LONG, split INT"


def _postgres(tmp: Path, pg):
    table = f"source_conformance_{next(_tables)}_{tmp.name[-12:].replace('-', '_')}"
    with pg.connect() as conn:
        conn.execute(f"CREATE TABLE {table} (id bigint PRIMARY KEY, split integer)")
        conn.execute(f"INSERT INTO {table} SELECT g, g % 3 FROM generate_series(0, {ROWS - 1}) AS g")
    return {"dsn": pg.dsn, "table": table, "offsetColumn": "id", "maxRowsPerTrigger": 100}, None


SOURCE_CASES = [
    SourceCase("sequence", "sparklink.sequence", _sequence),
    SourceCase("files-json", "sparklink.files", _files),
    SourceCase("postgres-table", "sparklink.postgres", _postgres, needs_postgres=True),
]


@pytest.fixture(params=SOURCE_CASES, ids=lambda case: case.name)
def source_args(request, tmp_path):
    case = request.param
    pg = request.getfixturevalue("postgres") if case.needs_postgres else None
    options, schema = case.prepare(tmp_path, pg)
    return {"fmt": case.fmt, "options": options, "schema": schema, "out": str(tmp_path / "out"),
            "checkpoint": str(tmp_path / "ck")}


@pytest.mark.slow
def test_source_survives_sigkill_and_restart(source_args, driver, tmp_path):
    crashed = driver.run(JOB, source_args, fault="sink.after_log:kill", once_marker=str(tmp_path / "fired"),
                         env={"SPARKLINK_FAULT_BATCH": "1"})
    assert crashed.killed, crashed.output
    restarted = driver.run(JOB, source_args)
    assert restarted.ok, restarted.output
    assert plain_reader_ids(Path(source_args["out"])) == list(range(ROWS))


@pytest.mark.slow
def test_source_read_retried_after_a_task_failure(source_args, driver):
    result = driver.run(JOB, source_args, fault="writer.after_write:raise", env={"SPARKLINK_FAULT_ATTEMPT": "0"},
                        master="local[2,3]")
    assert result.ok, result.output
    assert plain_reader_ids(Path(source_args["out"])) == list(range(ROWS))
