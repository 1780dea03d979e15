"""``sparklink demo`` end to end, as ``make demo`` runs it (shorter), in its own driver process."""

import subprocess
import sys

import pytest


@pytest.mark.slow
def test_demo_reports_rows_in_equal_rows_out_and_verify_ok(tmp_path, driver_class_archive):
    result = subprocess.run([sys.executable, "-m", "sparklink.cli.main", "demo", "--dir", str(tmp_path / "demo"),
                             "--duration", "5", "--interval", "0.3"],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "rows in = rows out               yes" in result.stdout
    assert "verify: OK" in result.stdout
    assert "malformed lines (dropped)" in result.stdout


class _SharedServer:
    """The test run's S3 server as the demo's own: the demo stops it at the end, this stop does not."""

    def __init__(self, server):
        self._server = server

    def __getattr__(self, name):
        return getattr(self._server, name)

    def stop(self) -> None:
        pass


def test_demo_on_s3_reports_rows_in_equal_rows_out_and_verify_ok_on_s3(tmp_path, spark, s3_server, monkeypatch,
                                                                        capsys):
    """``sparklink demo --s3`` as the command runs it, in the test run's Spark session and on its
    S3 server (a driver process and a server of its own would cost the suite about 40 s more;
    the test above runs the local demo in its own driver). The pipeline lands every row once in
    the S3 output, and ``verify`` on S3 passes: committed objects present with their sizes,
    no duplicate ``seq``, no incomplete multipart upload or tail object left."""
    import sparklink.cli.spark_sessions as spark_sessions
    import sparklink.testing.seaweedfs as seaweedfs
    from sparklink.cli.main import main

    monkeypatch.setattr(seaweedfs, "start_seaweedfs", lambda: _SharedServer(s3_server))
    monkeypatch.setattr(spark_sessions, "build_session", lambda settings: spark)
    monkeypatch.setattr(spark, "stop", lambda: None)  # the session goes on serving the other tests
    code = main(["demo", "--s3", "--dir", str(tmp_path / "demo"), "--duration", "2", "--interval", "0.3"])
    out = capsys.readouterr().out
    assert code == 0, out[-3000:]
    assert "file sink s3://sparklink-demo/out" in out and "rows in = rows out               yes" in out
    assert "rows out (file sink on S3)" in out and "verify: OK" in out
    assert "in-progress / pending / orphans  0 / 0 / 0" in out, out[-2000:]


def test_demo_on_s3_with_postgres_is_refused_before_anything_starts(tmp_path, capsys):
    """``--s3`` and ``--dsn`` together are refused naming both."""
    from sparklink.cli.main import main

    assert main(["demo", "--s3", "--dsn", "postgresql://nowhere", "--dir", str(tmp_path / "demo")]) == 2
    assert "--s3 and --dsn are not served together" in capsys.readouterr().err
