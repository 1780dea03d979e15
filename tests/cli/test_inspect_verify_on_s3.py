"""``sparklink inspect`` and ``sparklink verify`` on a file sink output on S3 (SeaweedFS).

The outputs are written in-process as Spark's adapter calls the sink (tasks, then the commit;
tests/files/test_file_sink_on_s3.py runs the same sink in Spark), and the commands run as
the ``sparklink`` CLI, their S3 settings from the standard AWS environment only.
"""

from __future__ import annotations

import json

import pytest

from sparklink.cli.main import main
from sparklink.errors import FaultInjected
from sparklink.faults import ENV_FAULT
from sparklink.files.sink.connector import FileSinkConnector
from sparklink.files.sink.state import SinkState
from sparklink.storage.s3_recoverable import upload_of
from sparklink.sink.protocol import commit_batch
from sparklink.testing.conformance.outputs import SEQUENCE_SCHEMA
from sparklink.testing.conformance.sinks import write_attempt
from sparklink.testing.faults import ENV_BATCH

PREFIX = "out"
# JSON files carried across micro-batches; a file rolls once it holds 1 KB
CARRIED_JSON = {"format": "json", "bucketAssigner": "basepath", "rollingPolicy": "default", "maxPartSize": "1KB",
                "rolloverInterval": "1h", "inactivityInterval": "1h"}


@pytest.fixture
def aws_environment(s3_server, monkeypatch):
    """The server's settings in the standard AWS environment (and nowhere else)."""
    for name in ("AWS_ENDPOINT_URL", "AWS_PROFILE", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    for name, value in s3_server.environment().items():
        monkeypatch.setenv(name, value)
    return s3_server.environment()


def _sink(s3_server, bucket, tmp_path, **options) -> FileSinkConnector:
    return FileSinkConnector({"path": f"s3://{bucket}/{PREFIX}", "checkpointLocation": str(tmp_path / "ck"),
                              **s3_server.options(), **options}, SEQUENCE_SCHEMA)


def _cli(capsys, *argv) -> tuple[int, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def _carried_output(s3_server, bucket, tmp_path) -> tuple[FileSinkConnector, SinkState]:
    """One committed micro-batch of JSON: partition 0's 100 rows rolled into files of 1 KB
    (visible) but the last, partition 1's 2 rows: both carried (open uploads, their tails in
    tail objects). Returns the sink and its committed state."""
    sink = _sink(s3_server, bucket, tmp_path, **CARRIED_JSON)
    staged = write_attempt(sink, 0, 0, 0, list(range(100)), "job0") + write_attempt(sink, 0, 1, 0, [100, 101], "job0")
    assert commit_batch(sink, 0, "job0", staged, ["q1"]) is True
    state = sink.state_store().get(0)
    assert state.finish and len(state.in_progress) == 2
    return sink, state


def test_inspect_and_verify_an_s3_output_with_settings_from_the_aws_environment(s3_server, s3_bucket, tmp_path,
                                                                                 aws_environment, monkeypatch,
                                                                                 capsys):
    """inspect counts the visible files, the carried uploads (their tails with them) and no
    orphan; verify reads the committed files back with ranged GETs and passes. The output
    names the endpoint, never the secret key, even when the credentials are wrong."""
    _, state = _carried_output(s3_server, s3_bucket, tmp_path)
    uri = f"s3://{s3_bucket}/{PREFIX}"
    code, text = _cli(capsys, "inspect", uri, "--json")
    assert code == 1, text  # the carried files' rows are committed and hidden: a finding
    report = json.loads(text)
    assert report["hiddenCommitted"].startswith("committed rows are hidden from readers: 2 carried file(s)")
    assert report["path"] == uri and report["committedBatches"] == 1 and report["unfinishedCommits"] == []
    assert report["finished"] == {"count": len(state.finish), "bytes": sum(p.length for p in state.finish)}
    assert report["inProgress"] == {"count": 2, "bytes": sum(upload_of(p).size for p in state.in_progress)}
    assert report["pending"]["count"] == 0 and report["orphans"] == {"count": 0, "bytes": 0}
    assert report["buckets"] == ["."]
    code, table = _cli(capsys, "inspect", f"s3a://{s3_bucket}/{PREFIX}")
    assert code == 1 and f"at endpoint {s3_server.endpoint}" in table and "committed batches  1" in table
    code, verified = _cli(capsys, "verify", uri, "--key", "id")
    assert code == 1 and "1 violation(s)" in verified and f"run `sparklink finish {uri}`" in verified, verified
    code, finished = _cli(capsys, "finish", uri)  # the command the finding names: the uploads completed
    assert code == 0 and "2 carried file(s) completed at their committed length" in finished, finished
    code, verified = _cli(capsys, "verify", uri, "--key", "id")
    assert code == 0, verified
    assert f"OK ({len(state.finish) + 2} files, 102 rows, no duplicate 'id')" in verified
    secret = aws_environment["AWS_SECRET_ACCESS_KEY"]
    assert all(secret not in shown for shown in (text, table, verified))
    wrong = "wrong-secret-do-not-show-42"
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", wrong)
    for command in ("inspect", "verify"):
        code, refused = _cli(capsys, command, uri)
        assert code == 2 and s3_server.endpoint in refused, refused
        assert wrong not in refused and secret not in refused


def test_verify_on_s3_flags_leftovers_strays_and_changed_files(s3_server, s3_bucket, tmp_path, aws_environment,
                                                               capsys):
    """A task attempt that never committed leaves an incomplete multipart upload and a tail
    object; an object put beside the sink's files is not in the commit log; a committed file
    rewritten shorter no longer holds the bytes its commit recorded. verify names each,
    inspect counts the orphans."""
    sink, state = _carried_output(s3_server, s3_bucket, tmp_path)
    client = s3_server.client()
    finished = state.finish[0]
    write_attempt(sink, 1, 0, 0, [500], "job-dead")  # a task of a run that died before its commit
    client.put_object(Bucket=s3_bucket, Key=f"{PREFIX}/part-stray-0.json", Body=b'{"id": 1, "split": 0}\n')
    key = f"{PREFIX}/{finished.final}"
    lines = client.get_object(Bucket=s3_bucket, Key=key)["Body"].read().splitlines(keepends=True)
    client.put_object(Bucket=s3_bucket, Key=key, Body=b"".join(lines[:50]))
    uri = f"s3://{s3_bucket}/{PREFIX}"
    code, text = _cli(capsys, "verify", uri, "--key", "id")
    assert code == 1, text
    assert f"committed file {finished.final} holds " in text and f"not the {finished.length} its commit recorded" in text
    assert "visible file part-stray-0.json is not in the commit log" in text
    assert "key id=1 appears 2 times" in text
    assert text.count("incomplete multipart upload ") == 1 and text.count(" is left over") == 2, text
    assert all(upload_of(p).upload_id not in text for p in state.in_progress)  # carried uploads are no orphans
    assert "committed rows are hidden from readers: 2 carried file(s)" in text
    code, report = _cli(capsys, "inspect", uri, "--json")
    assert code == 1 and json.loads(report)["orphans"]["count"] == 2  # the dead task's upload and tail
    assert json.loads(report)["inProgress"]["count"] == 2


def test_an_unfinished_commit_on_s3_shows_its_uploads_pending_not_orphaned(s3_server, s3_bucket, tmp_path,
                                                                           aws_environment, monkeypatch, capsys):
    sink = _sink(s3_server, s3_bucket, tmp_path, format="parquet", bucketAssigner="basepath")
    staged = write_attempt(sink, 0, 0, 0, [1, 2], "job0") + write_attempt(sink, 0, 1, 0, [3], "job0")
    monkeypatch.setenv(ENV_FAULT, "filesink.after_state:raise")
    monkeypatch.setenv(ENV_BATCH, "0")
    with pytest.raises(FaultInjected):
        commit_batch(sink, 0, "job0", staged, ["q1"])
    uri = f"s3://{s3_bucket}/{PREFIX}"
    code, text = _cli(capsys, "inspect", uri, "--json")
    report = json.loads(text)
    assert report["unfinishedCommits"] == ["0"] and report["pending"]["count"] == 2
    assert report["orphans"]["count"] == 0 and report["finished"]["count"] == 0
    code, text = _cli(capsys, "verify", uri)
    assert code == 1 and "commit 0 is not finished (restart the query to roll it forward)" in text
    assert "left over" not in text


def test_verify_on_s3_checks_spark_log_and_each_files_schema(s3_server, s3_bucket, tmp_path, aws_environment, capsys):
    """verify reads an S3 output's ``_spark_metadata`` and each typed file's schema as on local
    disk (the same code on the storage seam): a committed file missing from Spark's log is named
    (Spark's readers would not see it), and so is a committed file rewritten with another schema."""
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    sink = _sink(s3_server, s3_bucket, tmp_path, format="parquet", bucketAssigner="basepath")
    staged = write_attempt(sink, 0, 0, 0, [1, 2], "job0") + write_attempt(sink, 0, 1, 0, [3], "job0")
    assert commit_batch(sink, 0, "job0", staged, ["q1"]) is True
    uri = f"s3://{s3_bucket}/{PREFIX}"
    code, text = _cli(capsys, "verify", uri, "--key", "id")
    assert code == 0, text
    client = s3_server.client()
    first, second = sorted(p.final for p in sink.state_store().get(0).finish)
    other = io.BytesIO()
    pq.write_table(pa.table({"id": pa.array(["x"]), "split": pa.array([0], pa.int32())}), other)
    client.put_object(Bucket=s3_bucket, Key=f"{PREFIX}/{second}", Body=other.getvalue())
    log_key = f"{PREFIX}/_spark_metadata/0"
    lines = client.get_object(Bucket=s3_bucket, Key=log_key)["Body"].read().decode().splitlines()
    kept = [line for line in lines if first.rpartition("/")[2] not in line]  # Spark's log loses one file
    assert len(kept) == len(lines) - 1
    client.put_object(Bucket=s3_bucket, Key=log_key, Body="\n".join(kept).encode())
    code, text = _cli(capsys, "verify", uri)
    assert code == 1, text
    assert f"committed file {first} is not in _spark_metadata" in text, text
    assert f"file {second} has another schema than the output's recorded one: column 'id' is string" in text, text
