"""Nothing unseen, at any end (issue 34): every row a query committed is visible to Spark's own
readers and boto3 when ``awaitTermination()`` returns, after a restart with no new input, on
S3 at script exit and after ``spark.stop()`` with a query active; ``verify`` / ``inspect``
name what is hidden and the command that publishes it; ``finish`` counts what it did.

Two user scripts run in driver processes of their own, at the same time
(:mod:`tests.files.jobs_end_of_input`); the other cases run in the shared session.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from sparklink.cli.main import main
from sparklink.spark.finish import finish
from sparklink.spark.end_of_input import listening
from sparklink.testing.drivers import DriverProcess
from tests.files.jobs_end_of_input import LOCAL_ROWS, S3_ROWS, STOP_ROWS, TEXT_ROWS
from tests.files.jobs_sink import start_stream_to_files
from tests.files.s3_readers import all_keys, pending_uploads, s3_reader_ids
from tests.files.sink_readers import hidden_files, visible_files

JOBS = "tests.files.jobs_end_of_input"
FAILED = "finishing its output failed"


@pytest.fixture(scope="module")
def scripts(s3_server, tmp_path_factory):
    """Both driver scripts, run once, side by side; their outputs and logs."""
    root = tmp_path_factory.mktemp("nothing-unseen")
    bucket = s3_server.create_bucket("nothing-unseen")
    paths = {
        "local": {"out": str(root / "json"), "ck": str(root / "ck-json")},
        "s3": {"out": f"s3a://{bucket}/held", "ck": str(root / "ck-held")},
        "s3_text": {"out": f"s3a://{bucket}/text", "ck": str(root / "ck-text")},
        "stop": {"out": str(root / "stop"), "ck": str(root / "ck-stop")},
    }
    result = root / "seen.json"
    env = s3_server.environment()  # the sink's record holds no secret: the end of input takes the environment's
    awaited = DriverProcess(f"{JOBS}:returns_after_await_termination",
                            {"local": paths["local"], "s3": paths["s3"], "s3_text": paths["s3_text"],
                             "s3_options": s3_server.options(), "result": str(result)},
                            env=env, log_path=root / "awaited.log")
    stopped = DriverProcess(f"{JOBS}:stops_the_session_with_a_query_active", paths["stop"],
                            log_path=root / "stopped.log")
    runs = {"awaited": awaited.wait(timeout=300), "stopped": stopped.wait(timeout=300)}
    for name, run in runs.items():
        assert run.ok, f"the {name} script failed (exit {run.returncode}); its log:\n{run.output}"
    return {"paths": paths, "runs": runs, "seen": json.loads(result.read_text()), "bucket": bucket}


def _cli(capsys, *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    return code, capsys.readouterr().out


def test_a_read_right_after_await_termination_sees_every_row(scripts):
    log = scripts["runs"]["awaited"].output
    assert scripts["seen"]["json"] == LOCAL_ROWS, log  # spark.read.json in the script, at once
    out = scripts["paths"]["local"]["out"]  # after the script's exit: each id once, no file left hidden
    ids = [json.loads(line)["id"] for path in visible_files(out) for line in path.read_text().splitlines()]
    assert sorted(ids) == list(range(LOCAL_ROWS)) and hidden_files(out) == [], log


def test_on_s3_the_end_of_input_completes_at_script_exit(scripts, s3_server, monkeypatch, capsys):
    log, bucket, client = scripts["runs"]["awaited"].output, scripts["bucket"], s3_server.client()
    assert FAILED not in log and "cannot schedule new futures" not in log, log
    assert s3_reader_ids(client, bucket, "parquet", prefix="held") == list(range(S3_ROWS)), log
    assert s3_reader_ids(client, bucket, "json", prefix="text") == list(range(TEXT_ROWS)), log
    assert pending_uploads(client, bucket, "held") == [] and pending_uploads(client, bucket, "text") == []
    assert [key for key in all_keys(client, bucket, "text") if ".tail-" in key] == []
    for key, value in s3_server.environment().items():
        monkeypatch.setenv(key, value)
    code, text = _cli(capsys, "verify", scripts["paths"]["s3"]["out"], "--key", "id")
    assert code == 0 and f"{S3_ROWS} rows" in text, text


def test_spark_stop_with_a_query_active_leaves_every_row_visible(scripts, spark, capsys):
    out, log = scripts["paths"]["stop"]["out"], scripts["runs"]["stopped"].output
    assert spark.read.json(out).count() == STOP_ROWS, log
    code, text = _cli(capsys, "verify", out, "--key", "id")
    assert code == 0, text + log


def test_a_restart_without_new_input_finishes_what_an_earlier_run_left(spark, tmp_path, capsys):
    """A run ends with its files carried (as a run killed after its last commit leaves them:
    no end of input in that session); ``verify`` and ``inspect`` say so and name the command;
    the restart with ``availableNow`` finds no new input, runs no micro-batch, and its end
    publishes them."""
    out, ck = str(tmp_path / "out"), str(tmp_path / "ck")
    options = {"format": "text", "bucketAssigner": "basepath"}
    start_stream_to_files(spark, out=out, checkpoint=ck, rows=1000, options=options,
                          select="CAST(id AS STRING) AS value").awaitTermination()  # one micro-batch
    assert spark.read.text(out).count() == 0  # committed, carried, hidden
    code, text = _cli(capsys, "verify", out)
    assert code == 1 and "committed rows are hidden from readers: 2 carried file(s)" in text, text
    assert f"run `sparklink finish {out}`" in text, text
    code, text = _cli(capsys, "inspect", out)
    assert code == 1 and "finding            committed rows are hidden" in text, text
    with listening(spark):
        query = start_stream_to_files(spark, out=out, checkpoint=ck, rows=1000, options=options,
                                      select="CAST(id AS STRING) AS value")
        query.awaitTermination()
        assert query.lastProgress is None or query.lastProgress["numInputRows"] == 0  # no micro-batch ran
        assert sorted(int(r.value) for r in spark.read.text(out).collect()) == list(range(1000))
    code, text = _cli(capsys, "verify", out)
    assert code == 0, text


def test_finish_counts_what_it_did_also_when_it_completes_an_interrupted_finish(spark, tmp_path, monkeypatch,
                                                                               capsys):
    """A finish interrupted after its intent (as a failed end of input at exit leaves it):
    ``verify`` names the pending finish; the next ``finish`` completes it and counts it."""
    out = str(tmp_path / "out")
    start_stream_to_files(spark, out=out, checkpoint=str(tmp_path / "ck"), rows=600,  # one batch: held
                          select="id", options={"compaction.everyNCheckpoints": "2",
                                                "bucketAssigner": "basepath"}).awaitTermination()
    monkeypatch.setenv("SPARKLINK_FAULT", "finish.after_intent:raise")
    with pytest.raises(Exception, match="fault injected at 'finish.after_intent'"):
        finish(spark, out)
    monkeypatch.delenv("SPARKLINK_FAULT")
    code, text = _cli(capsys, "verify", out)
    assert code == 1 and "an interrupted finish (_sparklink/finish.json)" in text, text
    code, text = _cli(capsys, "finish", out)
    assert code == 0 and "1 compacted file(s) written" in text, text  # was: all 0 (the resumed finish not counted)
    assert spark.read.parquet(out).count() == 600
    assert _cli(capsys, "verify", out, "--key", "id")[0] == 0


@pytest.mark.parametrize("command", ["inspect", "verify", "finish"])
def test_a_path_that_does_not_exist_is_named_as_such(command, tmp_path, capsys):
    code, text = _cli(capsys, command, str(tmp_path / "nothing-here"))
    assert code == 2 and ("does not exist" in text or "is not a sparklink file sink output" in text), text
    if command != "finish":
        assert "does not exist" in text, text


def test_the_exit_barrier_runs_while_thread_pools_still_take_work():
    """The exit barrier runs at interpreter exit before ``concurrent.futures`` refuses new work
    (an ``atexit`` hook, as before issue 34, got ``cannot schedule new futures after interpreter
    shutdown``: the S3 finish at script exit failed). A plain interpreter, no Spark."""
    code = ("import concurrent.futures, sparklink.spark.end_of_input as e\n"
            "def drain():\n"
            "    with concurrent.futures.ThreadPoolExecutor(2) as pool:\n"
            "        print('exit barrier ran:', pool.submit(lambda: 42).result(), flush=True)\n"
            "e._drain_listener_bus = drain\n"
            "e._register_exit_barrier()\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0 and "exit barrier ran: 42" in run.stdout, run.stdout + run.stderr
    assert "cannot schedule new futures" not in run.stderr, run.stderr
