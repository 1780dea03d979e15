"""The project's sinks through the published conformance suite (sparklink.testing.conformance),
each configuration a subclass, exactly as a user tests a sink of their own.

Here every sink goes through the protocol points all sinks share and its own named points
(``filesink.*``, ``compaction.*``, ``postgres.*``); the file sink's cases run on local disk and
on S3 (SeaweedFS) from the same tests (one matrix for both stores). The example directory sink runs the same suite from
outside this folder: examples/conformance/.
"""

from __future__ import annotations

import itertools
import os

import pytest
from psycopg import sql

from sparklink.errors import ConfigError, FaultInjected
from sparklink.faults import ENV_FAULT
from sparklink.files.sink.connector import FileSinkConnector
from sparklink.storage.s3_recoverable import upload_of
from sparklink.postgres.connector import PostgresSinkConnector
from sparklink.testing.conformance import (SinkConformance, hidden_data_files, plain_reader_ids,
                                           plain_reader_json_ids)
from sparklink.testing.conformance.sinks import SIMULATED_ROWS, run_micro_batch
from sparklink.storage.memory import MemoryStorage, drop_memory_store, register_memory_store
from tests.files.s3_readers import PREFIX, all_keys, pending_uploads, s3_reader_ids


def memory_reader_ids(storage: MemoryStorage, file_format: str) -> list[int]:
    """Ids in the visible files of a memory store (no name segment starting with '.' or '_'),
    decoded by pyarrow (Parquet) or the json module (JSON lines)."""
    import json

    import pyarrow.parquet as pq

    ids = []
    for info in storage.list():
        if any(part.startswith((".", "_")) for part in info.key.split("/")):
            continue
        data = storage.read(info.key).data
        if file_format == "parquet":
            ids += pq.read_table(pa_buffer(data)).column("id").to_pylist()
        else:
            ids += [json.loads(line)["id"] for line in data.decode("utf-8").splitlines() if line.strip()]
    return sorted(ids)


def pa_buffer(data: bytes):
    import pyarrow as pa

    return pa.BufferReader(data)

_table_numbers = itertools.count()


FILE_SINK_POINTS = ("filesink.writer.before_commit", "filesink.before_state", "filesink.after_state",
                    "filesink.after_first_rename", "filesink.after_renames", "filesink.after_spark_log")
COMPACTION_POINTS = ("compaction.before_write", "compaction.after_write", "compaction.after_rename",
                     "compaction.after_remove")


STORES = ("local", "s3", "memory")  # memory: the in-memory seams, the crash cases without a disk (milliseconds)
_memory_stores = itertools.count()
S3_KILL_ROWS_PER_SPLIT = 50  # 2 micro-batches of 2 files: the kill in the second, the finishing run replays it


@pytest.fixture(scope="module")
def s3_client(s3_server):
    """A plain S3 client (boto3) for the checks (one per module: a client costs ~0.2 s)."""
    return s3_server.client()


class FileSinkCase(SinkConformance):
    """One file sink configuration, run on local disk and on S3 (SeaweedFS, one server per test
    session) by the same tests: ``sink_options`` is parametrized over :data:`STORES`. After each
    case a plain reader (pyarrow on local disk, boto3 on S3) sees every id once, and nothing
    staged is left (hidden files; on S3 multipart uploads and hidden objects too).

    Spark-driven tests whose S3 path is the same SDK call as a local one run on local disk only
    (each S3 skip names what covers it), and the real SIGKILLs of local outputs run in
    tests/files/test_file_sink_exactly_once.py; on S3 ``s3_sigkill_points`` run here."""

    format = "sparklink.files"
    sink_factory = FileSinkConnector
    connector_points = FILE_SINK_POINTS
    sigkill_points = ()  # local disk: tests/files/test_file_sink_exactly_once.py; S3: s3_sigkill_points
    s3_sigkill_points: tuple[str, ...] = ()
    s3_sigkill_rows_per_split = S3_KILL_ROWS_PER_SPLIT
    finish_points: tuple[str, ...] = ()  # the named points of sparklink.files.finish, for outputs it finishes
    task_failure_points = ("writer.after_write", "filesink.writer.before_commit")
    file_format = "parquet"
    extra_options: dict = {}
    store = "local"

    @pytest.fixture(params=STORES)
    def sink_options(self, request, tmp_path):
        self.store = request.param
        options = {"format": self.file_format, "bucketAssigner": "basepath", **self.extra_options}
        if self.store == "local":
            return {"path": str(tmp_path / "out"), **options}
        if self.store == "memory":
            name = f"conformance-{os.getpid()}-{next(_memory_stores)}"
            register_memory_store(name)
            request.addfinalizer(lambda: drop_memory_store(name))
            self.memory = MemoryStorage(name, "out")
            return {"path": f"memory://{name}/out", **options}
        s3_server = request.getfixturevalue("s3_server")
        self.bucket = request.getfixturevalue("s3_bucket")
        self.client = request.getfixturevalue("s3_client")
        self.sigkill_points = self.s3_sigkill_points
        self.sigkill_rows_per_split = self.s3_sigkill_rows_per_split
        return {"path": f"s3://{self.bucket}/{PREFIX}", **options, **s3_server.options()}

    def read_ids(self, options):
        if self.store == "s3":
            return s3_reader_ids(self.client, self.bucket, self.file_format)
        if self.store == "memory":
            return memory_reader_ids(self.memory, self.file_format)
        if self.file_format == "parquet":
            return plain_reader_ids(options["path"])
        return plain_reader_json_ids(options["path"])

    def leftovers(self, options):
        if self.store == "local":
            return hidden_data_files(options["path"])
        if self.store == "memory":
            return [info.key for info in self.memory.list() if not info.key.startswith("_")
                    and any(p.startswith(".") for p in info.key.split("/")) and info.size > 0]
        state = self.make_sink(options).state_store().latest_before(None)
        kept = state.in_progress + state.held  # carried and held files: open (or hidden) on purpose
        uploads = {upload_of(p).upload_id for p in kept}
        kept_keys = {upload_of(p).tail_key for p in state.in_progress} | {p.path for p in state.held}
        found = [u for u in pending_uploads(self.client, self.bucket) if u.rpartition("(upload ")[2][:-1] not in uploads]
        hidden = [k for k in all_keys(self.client, self.bucket)
                  if not k.startswith((f"{PREFIX}/_sparklink/", f"{PREFIX}/_spark_metadata/"))
                  and any(p.startswith(".") for p in k.split("/")) and k.removeprefix(f"{PREFIX}/") not in kept_keys]
        return found + hidden

    def pytest_generate_tests(self, metafunc):
        super().pytest_generate_tests(metafunc)
        if "finish_point" in metafunc.fixturenames:
            metafunc.parametrize("finish_point", metafunc.cls.finish_points or ("none",))

    def test_simulated_crash_in_finish(self, finish_point, sink_options, tmp_path, monkeypatch, request):
        """Two micro-batches leave files hidden (carried or held); ``sparklink.files.finish``
        crashes at ``finish_point`` (raised there, as the process dying); the next finish rolls
        it forward: every id once, nothing staged left, a third finish has nothing to do."""
        if not self.finish_points:
            pytest.skip(f"{type(self).__name__}: no file is carried or held at the end of a micro-batch")
        from sparklink.files.sink.finish import finish_output
        from sparklink.sink.lease import process_identity

        options = dict(sink_options, checkpointLocation=str(tmp_path / "ck"))
        for batch in range(2):
            run_micro_batch(self.make_sink(options), batch, 2, f"job-{batch}")
        if self.store == "s3":  # finish reads the S3 settings from the AWS environment (no secret is recorded)
            for key, value in request.getfixturevalue("s3_server").environment().items():
                monkeypatch.setenv(key, value)
        with monkeypatch.context() as armed:
            armed.setenv(ENV_FAULT, f"{finish_point}:raise")
            try:
                with pytest.raises(FaultInjected, match=finish_point.replace(".", r"\.")):
                    finish_output(options["path"], driver=process_identity())
            except ConfigError as exc:
                if "not served" in str(exc):
                    pytest.skip(f"sparklink.files.finish on S3 (issue 23, the storage seam's part) is not merged "
                                f"here: {exc}")
                raise
        assert finish_output(options["path"], driver=process_identity()).files >= 0  # rolls the crashed finish forward
        assert finish_output(options["path"], driver=process_identity()).files == 0
        self.assert_exactly_once(options, expected=list(range(2 * SIMULATED_ROWS)))

    def test_simulated_crash_at_fault_point(self, crash_point, sink_options, tmp_path, monkeypatch):
        if self.store == "local":
            pytest.skip("crashed at on the memory store (the same protocol and recovery, milliseconds) and on S3; "
                        "local disk's own steps are SIGKILLed for real in tests/files/test_file_sink_exactly_once.py "
                        "and test_file_sink_spark_readers.py")
        super().test_simulated_crash_at_fault_point(crash_point, sink_options, tmp_path, monkeypatch)

    def test_second_query_on_the_same_output_is_refused(self, sink_options, spark, tmp_path):
        if self.store == "memory":
            pytest.skip("Spark's executors cannot see a memory store; the local store runs it")
        if self.store == "s3":
            pytest.skip("on S3 the owner claim is the same SDK call, refusing a second query: "
                        "tests/sink/test_protocol_on_s3.py")
        super().test_second_query_on_the_same_output_is_refused(sink_options, spark, tmp_path)

    def test_task_failing_on_its_first_attempt(self, sink_options, armed, tmp_path, spark):
        if self.store == "memory":
            pytest.skip("Spark's executors cannot see a memory store; the local store runs it")
        if self.store == "s3":
            pytest.skip("Spark's failed attempts run on local disk; on S3 a writer's abort is the same call, "
                        "tests/files/test_file_sink_on_s3.py::test_nothing_uncommitted_is_listed_and_recovery_"
                        "leaves_no_upload")
        super().test_task_failing_on_its_first_attempt(sink_options, armed, tmp_path, spark)


class TestFileSinkParquet(FileSinkCase):
    """The default format. On S3 the crash between two CompleteMultipartUploads of one commit
    (``filesink.after_first_rename``) is simulated; the real S3 kill is TestFileSinkJsonCarried's."""


class TestFileSinkJsonRolling(FileSinkCase):
    """Rows are appended to in-progress files and rolled at the commit; carrying files across
    batches (data not visible until a later roll) is TestFileSinkJsonCarried."""

    file_format = "json"
    extra_options = {"rollingPolicy": "default", "maxPartSize": "2KB", "rolloverInterval": "0s"}


class TestFileSinkJsonCarried(FileSinkCase):
    """A row format whose in-progress files are carried across micro-batches (the hardest case:
    a replay must cut a carried file back to its committed length; on S3 resume its upload from
    the parts and the tail object the commit recorded); the finishing run rolls every file so
    that all rows are visible."""

    file_format = "json"
    extra_options = {"bucketAssigner": "column", "bucketColumn": "split", "rollingPolicy": "default",
                     "maxPartSize": "3KB", "rolloverInterval": "1h", "inactivityInterval": "1h"}
    # micro-batches of the simulated crashes are too small to roll a file before the finishing one
    connector_points = tuple(p for p in FILE_SINK_POINTS if p != "filesink.after_first_rename")
    # S3: the file sink's one real kill on S3 (the hardest case there), once the commit's state names the
    # carried files' lengths, parts and tails, before any of it is applied; 3 micro-batches, so that the
    # finishing run commits one that rolls every file
    s3_sigkill_points = ("filesink.after_state",)
    s3_sigkill_rows_per_split = 100
    finish_points = ("finish.after_intent", "finish.after_state")  # carried files copied to finished ones

    def finishing_options(self, options):
        return dict(options, rolloverInterval="0s")


class TestFileSinkCompaction(FileSinkCase):
    """Every micro-batch's files compacted into one before the commit (on S3 the inputs are
    uploaded at hidden names, completed there, read back and deleted; the compacted file is an
    upload at its finished name)."""

    # every file goes through compaction: no part file is renamed on its own (no first rename)
    connector_points = tuple(p for p in FILE_SINK_POINTS if p != "filesink.after_first_rename") + COMPACTION_POINTS
    extra_options = {"compaction.everyNCheckpoints": "1"}
    # S3: the compaction's points are simulated here; killed for real on S3 inside the finish
    # (tests/files/test_file_sink_spark_log_on_s3.py: compaction.after_rename)


class TestFileSinkCompactionHeld(FileSinkCase):
    """Compaction every 3 micro-batches: the files of the last micro-batches are held (pending,
    hidden) until ``sparklink.files.finish`` compacts them; only the finish is crashed at here
    (the commit's points run in TestFileSinkCompaction)."""

    connector_points = ()
    extra_options = {"compaction.everyNCheckpoints": "3"}
    finish_points = ("finish.after_intent", "compaction.after_write", "compaction.after_rename", "finish.after_state")

    @classmethod
    def fault_points(cls):
        return ()

    def test_two_attempts_of_one_task_commit_once_and_commit_twice_is_a_no_op(self):
        pytest.skip("TestFileSinkCompaction runs it (the commit is the same)")

    def test_second_query_on_the_same_output_is_refused(self):
        pytest.skip("TestFileSinkCompaction runs it (the commit is the same)")

    def test_task_failing_on_its_first_attempt(self):
        pytest.skip("TestFileSinkCompaction runs it (the commit is the same)")


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
    semantic = "upsert"  # no point of its own: every point crashed at by simulation here
    # PostgreSQL's one real SIGKILL sequence (every semantic) is tests/postgres/test_exactly_once.py
    sigkill_points = ()


class TestPostgresTwoPhase(PostgresCase):
    semantic = "two-phase"
    connector_points = ("postgres.after_prepare", "postgres.between_commit_prepared")
    task_failure_points = ("writer.after_write", "postgres.after_prepare")
    sigkill_points = ()  # its real SIGKILL sequence: tests/postgres/test_exactly_once.py


class TestPostgresWriteAhead(PostgresCase):
    semantic = "write-ahead"
    connector_points = ("postgres.before_wal_commit",)
    sigkill_points = ()  # its real SIGKILL sequence: tests/postgres/test_exactly_once.py
