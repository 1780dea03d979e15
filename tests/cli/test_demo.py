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


def test_demo_on_s3_with_postgres_is_refused_before_anything_starts(tmp_path, capsys):
    """``--s3`` and ``--dsn`` together are refused naming both (the S3 demo itself is run by hand:
    a driver run would cost the suite ~40 s; docs/cli.md quotes one)."""
    from sparklink.cli.main import main

    assert main(["demo", "--s3", "--dsn", "postgresql://nowhere", "--dir", str(tmp_path / "demo")]) == 2
    assert "--s3 and --dsn are not served together" in capsys.readouterr().err
