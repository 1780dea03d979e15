"""The project's sources through the published conformance suite (sparklink.testing.conformance):
each streams into the exactly-once directory sink, is SIGKILLed mid-query and restarted, and
every input record must arrive exactly once."""

from __future__ import annotations

import itertools
import json

import pytest

from sparklink.testing.conformance import SourceConformance
from sparklink.testing.conformance.sources import ROWS

_tables = itertools.count()


class TestSequenceSource(SourceConformance):
    format = "sparklink.sequence"
    # sequence -> directory sink with every first attempt failing: the sink suite's own job
    read_retry_covered_by = "examples/conformance (TestDirectorySink::test_task_failing_on_its_first_attempt)"
    # and SIGKILLed at three points of the directory sink's commit, restarted on other partition counts
    sigkill_covered_by = ("examples/conformance (TestDirectorySink::test_sigkill_at_each_protocol_point_with_"
                          "restarts_on_other_partition_counts)")

    @pytest.fixture
    def source_options(self):
        return {"numSplits": 3, "rowsPerSplit": ROWS // 3, "maxRowsPerTrigger": 100}


class TestFileSourceJson(SourceConformance):
    format = "sparklink.files"
    schema = "id LONG, split INT"
    # the file source's kill sequence: three kills at the sink's commit points while files arrive
    sigkill_covered_by = ("tests/files/test_file_source_exactly_once.py "
                          "(test_driver_killed_at_each_commit_point_while_files_arrive)")

    @pytest.fixture
    def source_options(self, tmp_path):
        landing = tmp_path / "landing"
        landing.mkdir()
        for index in range(6):  # six files of 50 JSON lines, two per trigger
            lines = [json.dumps({"id": index * 50 + row, "split": index}) for row in range(50)]
            (landing / f"part-{index}.json").write_text("\n".join(lines) + "\n")
        return {"path": str(landing), "format": "json", "maxFilesPerTrigger": 2, "minFileAge": "0s"}


class TestPostgresTableSource(SourceConformance):
    format = "sparklink.postgres"

    @pytest.fixture
    def source_options(self, tmp_path, postgres):
        table = f"source_conformance_{next(_tables)}_{tmp_path.name[-12:].replace('-', '_')}"
        with postgres.connect() as conn:
            conn.execute(f"CREATE TABLE {table} (id bigint PRIMARY KEY, split integer)")
            conn.execute(f"INSERT INTO {table} SELECT g, g % 3 FROM generate_series(0, {ROWS - 1}) AS g")
        return {"dsn": postgres.dsn, "table": table, "offsetColumn": "id", "maxRowsPerTrigger": 100}
