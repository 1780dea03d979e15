"""The published conformance suite run against the SDK's example directory sink, from outside
the package's own tests: what a user writes to test a sink of their own (docs/sdk.md).

    .venv/bin/python -m pytest examples/conformance
"""

import pytest

from sparklink.examples.directory_sink import DirectorySink
from sparklink.testing.conformance import SinkConformance, hidden_data_files, plain_reader_ids


class TestDirectorySink(SinkConformance):
    format = "sparklink.directory"  # registered by sparklink.register; a format of your own: data_source = "pkg.mod:Cls"
    sink_factory = DirectorySink
    # real SIGKILLs at the SDK's first and last steps; sink.after_log is killed for real by the
    # Kafka and PostgreSQL upsert sequences and crashed at by simulation here (the suite's budget)
    # one real kill (a task's file written, the batch not committed); sink.after_commit is killed for
    # real by the file source's sequence (tests/files/test_file_source_exactly_once.py, into this sink)
    sigkill_points = ("writer.after_write",)
    sigkill_rows_per_split = 50  # 2 micro-batches: the kill in the second, whose replay is all the finishing run does

    @pytest.fixture
    def sink_options(self, tmp_path):
        return {"path": str(tmp_path / "out")}

    def read_ids(self, options):
        return plain_reader_ids(options["path"])

    def leftovers(self, options):
        return hidden_data_files(options["path"])
