"""sparklink on a Spark standalone cluster: a master and two workers on loopback, executors in
a Python environment WITHOUT sparklink installed (the code is shipped with ``--py-files``),
exactly-once output, and a worker SIGKILLed mid-stream."""

from __future__ import annotations

import json
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from sparklink.spark.py_files import build_py_files_zip
from sparklink.testing.cluster import StandaloneCluster

REPO_ROOT = Path(__file__).resolve().parents[2]
WORKER_VENV = REPO_ROOT / ".venv-workers"


@pytest.fixture(scope="module")
def worker_python() -> str:
    """A separate interpreter for executors: sparklink's dependencies, but not sparklink. It is a
    venv without packages of its own whose ``.pth`` file adds this environment's site-packages:
    pyarrow, pandas, psycopg are found there, sparklink is not (its editable install is a ``.pth``
    of that directory, which Python reads only for a site directory, not for a path added by one)."""
    python = WORKER_VENV / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(WORKER_VENV)], check=True)
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    Path(site, "sparklink-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    probe = subprocess.run([str(python), "-c", "import pyarrow, pandas, psycopg, fastavro; import sparklink"],
                           capture_output=True, text=True)
    assert "No module named 'sparklink'" in probe.stderr, f"the workers' environment: {probe.stderr[-2000:]}"
    return str(python)


@pytest.fixture(scope="module")
def running_cluster(tmp_path_factory, worker_python):
    """One master and two workers for the module."""
    work = tmp_path_factory.mktemp("cluster")
    with StandaloneCluster(work_dir=work, workers=2, worker_env={"PYSPARK_PYTHON": worker_python}) as running:
        yield running


@pytest.fixture
def cluster(running_cluster):
    """The module's cluster with both workers alive: a test kills worker 0, which is started
    again before the next test."""
    yield running_cluster
    if running_cluster.status().get("aliveworkers", 0) < running_cluster.workers:
        running_cluster.restart_worker(0)


def cluster_conf(tmp_path, worker_python):
    shipped = build_py_files_zip(tmp_path / "dist" / "sparklink.zip")
    return {
        "spark.submit.pyFiles": str(shipped),
        "spark.pyspark.python": worker_python,
        "spark.pyspark.driver.python": sys.executable,
        "spark.executor.memory": "512m",
        "spark.cores.max": "2",
        "spark.task.maxFailures": "4",
        "spark.python.worker.reuse": "true",
    }


def wait_for_first_commit_then_kill_a_worker(cluster, job, flag):
    deadline = time.time() + 240
    while not flag.exists():
        assert job.process.poll() is None, job.wait(1).output
        assert time.time() < deadline, "the first micro-batch never committed"
        time.sleep(0.5)
    cluster.kill_worker(0)
    assert job.process.poll() is None, "the worker was killed after the query had ended, not mid-stream"
    deadline = time.time() + 120
    while cluster.status().get("aliveworkers") != 1:  # the master notices the lost worker
        assert time.time() < deadline, cluster.status()
        time.sleep(1)


@pytest.mark.slow
def test_local_and_s3_pipelines_on_a_cluster_with_a_worker_killed(cluster, driver, tmp_path, worker_python,
                                                                  postgres, s3_server, s3_bucket):
    """One driver on the cluster runs the file source into the file sink and into PostgreSQL
    (two-phase), and the deployment of a user who outgrew one machine: input and output on S3
    (SeaweedFS), Spark's checkpoint on the shared local directory (Spark itself cannot reach S3
    without the hadoop-aws jars). A worker is SIGKILLed once both file sinks committed: plain
    readers (pyarrow, psycopg, boto3 + pyarrow) see every record once, nothing stays prepared in
    PostgreSQL, Spark's log on S3 names exactly the visible objects, and no multipart upload is
    left open."""
    from tests.files.s3_readers import pending_uploads, visible_keys
    from tests.files.test_file_sink_spark_log_on_s3 import spark_log_view

    landing = tmp_path / "landing"
    landing.mkdir()
    client = s3_server.client()
    for index in range(16):  # 16 files (objects) of 250 records; 2 per micro-batch
        body = "\n".join(json.dumps({"seq": index * 250 + row, "payload": f"p{index}"}) for row in range(250)) + "\n"
        (landing / f"events-{index:03d}.json").write_text(body)
        client.put_object(Bucket=s3_bucket, Key=f"landing/events-{index:03d}.json", Body=body.encode())
    table = f"cluster_events_{tmp_path.name[-10:].replace('-', '_')}"
    local = {"landing": str(landing), "out": str(tmp_path / "out"), "checkpoint": str(tmp_path / "ck"),
             "dsn": postgres.dsn, "table": table}
    s3 = {"landing": f"s3a://{s3_bucket}/landing", "out": f"s3a://{s3_bucket}/out",
          "checkpoint": str(tmp_path / "ck-s3"), "s3_options": s3_server.options()}
    job = driver.start("tests.cluster.jobs:local_and_s3_pipelines",
                       {"local": local, "s3": s3, "started_flag": str(tmp_path / "started")}, master=cluster.url,
                       spark_conf=cluster_conf(tmp_path, worker_python))
    wait_for_first_commit_then_kill_a_worker(cluster, job, tmp_path / "started")
    result = job.wait(timeout=600)
    assert result.ok, result.output
    seqs = ds.dataset(str(tmp_path / "out"), format="parquet", ignore_prefixes=[".", "_"]).to_table().column("seq")
    assert sorted(seqs.to_pylist()) == list(range(4000)), result.output[-3000:]
    with postgres.connect() as conn:
        assert sorted(r[0] for r in conn.execute(f"SELECT seq FROM {table}").fetchall()) == list(range(4000))
        assert conn.execute("SELECT count(*) FROM pg_prepared_xacts").fetchone()[0] == 0
    assert seqs_on_s3(client, s3_bucket) == list(range(4000)), result.output[-3000:]
    logged = sorted(s["path"].removeprefix(f"s3a://{s3_bucket}/") for s in spark_log_view(client, s3_bucket, "out"))
    assert logged == sorted(visible_keys(client, s3_bucket))
    assert pending_uploads(client, s3_bucket) == []


def seqs_on_s3(client, bucket: str) -> list[int]:
    """The ``seq`` values a plain S3 reader sees in the output's visible Parquet objects."""
    import io

    import pyarrow.parquet as pq

    from tests.files.s3_readers import visible_keys

    seqs = []
    for key in visible_keys(client, bucket):
        data = client.get_object(Bucket=bucket, Key=key)["Body"].read()
        seqs.extend(pq.read_table(io.BytesIO(data), columns=["seq"]).column("seq").to_pylist())
    return sorted(seqs)
