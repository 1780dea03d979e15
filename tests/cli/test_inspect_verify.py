"""``sparklink inspect`` and ``sparklink verify`` on real file sink output, sound and damaged."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from sparklink.cli.main import main
from sparklink.files.spark_log import METADATA_DIR, uri_of


@pytest.fixture(scope="module")
def sink_output(spark, tmp_path_factory):
    """A streaming file sink output: 3 micro-batches of Parquet into 3 column buckets.
    Each test works on a copy, which it may damage."""
    root = tmp_path_factory.mktemp("sink")
    (spark.readStream.format("sparklink.sequence").option("numSplits", 2).option("rowsPerSplit", 150)
     .option("maxRowsPerTrigger", 100).load().selectExpr("id", "CAST(id % 3 AS STRING) AS kind")
     .writeStream.format("sparklink.files").option("path", str(root / "out")).option("format", "parquet")
     .option("bucketAssigner", "column").option("bucketColumn", "kind")
     .option("checkpointLocation", str(root / "ck")).trigger(availableNow=True).start().awaitTermination())
    return root / "out"


@pytest.fixture
def output(sink_output, tmp_path):
    copy = tmp_path / "out"
    shutil.copytree(sink_output, copy)
    for log_file in (copy / METADATA_DIR).iterdir():  # Spark's log names absolute paths: point them at the copy
        log_file.write_text(log_file.read_text().replace(uri_of(sink_output), uri_of(copy)))
    return copy


def run_cli(capsys, *argv):
    code = main(list(argv))
    return code, capsys.readouterr().out


def test_inspect_json_shape(output, capsys):
    code, text = run_cli(capsys, "inspect", str(output), "--json")
    assert code == 0
    report = json.loads(text)
    assert set(report) == {"path", "committedBatches", "firstBatch", "lastBatch", "jobCommits", "unfinishedCommits",
                           "lastCommitTime", "buckets", "finished", "inProgress", "pending", "orphans", "held",
                           "finishPending", "hiddenCommitted"}
    assert report["committedBatches"] == 3 and report["lastBatch"] == 2
    assert report["buckets"] == ["kind=0", "kind=1", "kind=2"]
    assert report["finished"]["count"] >= 3 and report["finished"]["bytes"] > 0
    assert report["orphans"] == {"count": 0, "bytes": 0}


def test_inspect_table(output, capsys):
    code, text = run_cli(capsys, "inspect", str(output))
    assert code == 0
    assert "committed batches  3 (batch 0 .. 2)" in text and "finished" in text


def test_verify_passes_on_sound_output(output, capsys):
    code, text = run_cli(capsys, "verify", str(output), "--key", "id")
    assert code == 0, text
    assert "OK" in text and "300 rows" in text


def _first_visible(output: Path) -> Path:
    return sorted(p for p in output.rglob("part-*") if not p.name.startswith("."))[0]


def _damage_truncate(output: Path) -> str:
    victim = _first_visible(output)
    victim.write_bytes(victim.read_bytes()[:40])
    return "unreadable file"


def _damage_delete(output: Path) -> str:
    _first_visible(output).unlink()
    return "is missing"


def _damage_stray(output: Path) -> str:
    shutil.copy(_first_visible(output), output / "kind=0" / "part-stray-0.parquet")
    return "visible file kind=0/part-stray-0.parquet is not in the commit log"


def _damage_orphan(output: Path) -> str:
    (output / "kind=1" / ".part-deadbeef-0.parquet.inprogress.sabc123").write_bytes(b"partial")
    return "orphaned part file kind=1/.part-deadbeef-0.parquet.inprogress.sabc123"


def _damage_duplicate(output: Path) -> str:
    victim = _first_visible(output)
    shutil.copy(victim, victim.with_name("part-copy-0.parquet"))
    return "appears 2 times"


def _damage_unfinished(output: Path) -> str:
    entry = output / "_sparklink" / "commits" / "2.json"
    data = json.loads(entry.read_text())
    data["state"] = "committing"
    entry.write_text(json.dumps(data))
    return "commit 2 is not finished"


@pytest.mark.parametrize("damage", [_damage_truncate, _damage_delete, _damage_stray, _damage_orphan,
                                    _damage_duplicate, _damage_unfinished],
                         ids=["truncated-file", "deleted-file", "stray-file", "orphan", "duplicate-key",
                              "unfinished-commit"])
def test_verify_flags_a_damaged_output(output, capsys, damage):
    expected = damage(output)
    code, text = run_cli(capsys, "verify", str(output), "--key", "id")
    assert code == 1
    assert expected in text


def test_not_a_sink_output(tmp_path, capsys):
    code, text = run_cli(capsys, "verify", str(tmp_path))
    assert code == 2 and "is not a sparklink file sink output" in text
    code, text = run_cli(capsys, "inspect", str(tmp_path), "--json")
    assert code == 2


@pytest.mark.parametrize("command", ["demo", "inspect", "verify"])
def test_every_command_has_help(command, capsys):
    with pytest.raises(SystemExit) as exited:
        main([command, "--help"])
    assert exited.value.code == 0
    assert "usage: sparklink " + command in capsys.readouterr().out


@pytest.mark.parametrize("command", ["inspect", "verify"])
def test_a_path_of_another_scheme_is_refused_not_read_as_a_local_path(command, capsys):
    assert main([command, "hdfs://acc/out"]) == 2  # s3:// is served: tests/cli/test_inspect_verify_on_s3.py
    assert "scheme 'hdfs://' is not served" in capsys.readouterr().out
