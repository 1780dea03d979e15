"""``sparklink run --remote sc://host:port`` (and ``SPARK_REMOTE``): a pipeline runs on a Spark
Connect server, its output read back by Spark's own reader and pyarrow; ``--check`` analyses it there."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import pyarrow.dataset as pa_dataset

from sparklink.cli.main import main
from sparklink.cli.run_command import run

PIPELINE = """
[spark]
app_name = "remote-pipeline"

[sources.events]
format = "sparklink.files"
schema = "id long"
options = {{ path = "{source}", format = "json" }}

[transform]
sql = "SELECT id, id % 3 AS bucket FROM events"

[[sinks]]
name = "files"
format = "sparklink.files"
checkpoint = "{checkpoint}"
options = {{ path = "{out}", format = "parquet", bucketAssigner = "column", bucketColumn = "bucket" }}

[trigger]
mode = "availableNow"
"""


def test_run_on_a_connect_server_through_spark_remote(connect_server, tmp_path):
    source, out = tmp_path / "in", tmp_path / "out"
    source.mkdir()
    (source / "a.json").write_text("".join(json.dumps({"id": i}) + "\n" for i in range(90)))
    pipeline = tmp_path / "pipeline.toml"
    pipeline.write_text(PIPELINE.format(source=source, checkpoint=tmp_path / "ck", out=out))
    env = {**os.environ, "SPARK_REMOTE": connect_server.url}
    result = subprocess.run([sys.executable, "-m", "sparklink.cli.main", "run", str(pipeline)], env=env,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr[-3000:] + connect_server.log_tail()
    assert f"Spark Connect server {connect_server.url}" in result.stdout
    assert "files: read events 90 rows; wrote 90 rows" in result.stdout, result.stdout
    ids = pa_dataset.dataset(str(out), format="parquet").to_table(columns=["id"]).column("id").to_pylist()
    assert sorted(ids) == list(range(90))


def test_remote_must_be_a_connect_url_and_excludes_master(tmp_path, capsys):
    pipeline = tmp_path / "pipeline.toml"
    pipeline.write_text(PIPELINE.format(source=tmp_path, checkpoint=tmp_path / "ck", out=tmp_path / "out"))
    assert main(["run", str(pipeline), "--remote", "http://127.0.0.1:15002"]) == 2
    assert "option '--remote': 'http://127.0.0.1:15002' is not a Spark Connect URL" in capsys.readouterr().out
    assert main(["run", str(pipeline), "--remote", "sc://127.0.0.1:1", "--master", "local[2]"]) == 2
    assert "--master and --remote exclude each other" in capsys.readouterr().out


def test_check_through_a_connect_server_starts_no_query(connect_server, connect_spark, tmp_path, capsys,
                                                        jvm_attributes_touched):
    """``sparklink run --check --remote sc://...``: the options are parsed here, the sources and
    the SQL analysed by the server (a Connect session's analysis), and no query starts; a column
    the SQL cannot resolve is named in one line (the session is the shared client session, as
    ``run`` takes one given to it). No JVM attribute is asked of the Connect session."""
    source, out = tmp_path / "in", tmp_path / "out"
    source.mkdir()
    pipeline = tmp_path / "pipeline.toml"
    pipeline.write_text(PIPELINE.format(source=source, checkpoint=tmp_path / "ck", out=out))

    def check() -> tuple[int, str]:
        args = argparse.Namespace(pipeline=str(pipeline), master=None, remote=connect_server.url, duration=None,
                                  check=True, verbose=False)
        return run(args, spark=connect_spark), capsys.readouterr().out

    code, said = check()
    assert code == 0 and "check: options, paths and SQL are valid (no query was started)" in said, said
    assert f"Spark Connect server {connect_server.url}" in said
    assert connect_spark.streams.active == [] and not out.exists()
    pipeline.write_text(pipeline.read_text().replace("id % 3 AS bucket", "idd % 3 AS bucket"))
    code, said = check()
    assert code == 1 and "transform.sql" in said and "idd" in said, said
    assert connect_spark.streams.active == []
    assert jvm_attributes_touched == []
