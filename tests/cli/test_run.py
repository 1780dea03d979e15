"""``sparklink run PIPELINE.toml``: a real pipeline run, and bad files named by key and line."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from sparklink.cli.main import main
from sparklink.cli.pipeline_config import PipelineError, load_pipeline

GOOD = """\
[spark]
app_name = "test-pipeline"

[sources.numbers]
format = "sparklink.sequence"
options = { numSplits = 2, rowsPerSplit = 100, maxRowsPerTrigger = 80 }

[transform]
sql = "SELECT id, split FROM numbers WHERE id % 2 = 0"

[[sinks]]
name = "files"
format = "sparklink.files"
checkpoint = "{ck}"
options = {{ path = "{out}", format = "json", bucketAssigner = "basepath" }}
"""


def write(tmp_path, text):
    path = tmp_path / "pipeline.toml"
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


@pytest.mark.slow
def test_run_a_pipeline_then_verify(tmp_path):
    pipeline = write(tmp_path, GOOD.replace("{ck}", str(tmp_path / "ck")).replace("{out}", str(tmp_path / "out"))
                     .replace("{{", "{").replace("}}", "}"))
    result = subprocess.run([sys.executable, "-m", "sparklink.cli.main", "run", str(pipeline), "--master", "local[2]"],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    assert "done: files: 200 rows" in result.stdout
    assert main(["verify", str(tmp_path / "out"), "--key", "id"]) == 0


def test_check_prints_the_plan(tmp_path, capsys):
    pipeline = write(tmp_path, GOOD.replace("{ck}", "ck").replace("{out}", "out").replace("{{", "{").replace("}}", "}"))
    assert main(["run", str(pipeline), "--check"]) == 0
    assert "sources numbers (sparklink.sequence) -> SQL transform -> sinks files (sparklink.files)" in \
        capsys.readouterr().out


@pytest.mark.parametrize(("text", "message"), [
    ('[sources.a]\nformat = "x"\n[[sinks]]\nformat = "y"\ncheckpoint = "c"\n[trigger]\nmode = "sometimes"\n',
     r"line 7: 'trigger.mode': unknown value 'sometimes' \(accepted: availableNow, processingTime\)"),
    ('[sources.a]\nformat = "x"\ncolour = "red"\n[[sinks]]\nformat = "y"\ncheckpoint = "c"\n',
     r"line 3: 'sources.a.colour': unknown key \(accepted: format, schema, options\)"),
    ('[sources.a]\nformat = "x"\n\n[[sinks]]\nformat = "y"\n',
     r"'sinks': is missing the key 'checkpoint'"),
    ('[sources.a]\nformat = "x"\n[[sinks]]\nformat = "y"\ncheckpoint = "c"\n[trigger]\nmode = "processingTime"\n',
     r"'trigger': is missing the key 'interval'"),
    ('[sources.a]\nformat = = "x"\n', r"line 2: 'syntax'"),
    ('[[sinks]]\nformat = "y"\ncheckpoint = "c"\n', r"'sources': at least one \[sources.<name>\] table is required"),
    ('[sources.a]\nformat = "x"\noptions = { path = ["a", "b"] }\n[[sinks]]\nformat = "y"\ncheckpoint = "c"\n',
     r"line 3: 'sources.a.options': option 'path' must be a string, number or boolean"),
], ids=["bad-trigger", "unknown-key", "missing-checkpoint", "missing-interval", "toml-syntax", "no-source",
        "list-option"])
def test_bad_pipeline_files_name_the_key_and_line(tmp_path, text, message):
    with pytest.raises(PipelineError, match=message):
        load_pipeline(write(tmp_path, text))


def test_bad_file_exit_status(tmp_path, capsys):
    assert main(["run", str(tmp_path / "missing.toml")]) == 2
    assert "cannot be read" in capsys.readouterr().out
