"""``sparklink run PIPELINE.toml``: a real pipeline run, and bad files named by key and line."""

from __future__ import annotations

import argparse
import inspect
import subprocess
import sys
import textwrap

import pytest

from sparklink.cli import demo, run_command
from sparklink.cli.main import build_parser, main
from sparklink.cli.spark_sessions import pipeline_settings
from sparklink.cli.pipeline_config import PipelineError, load_pipeline
from tests.files.sink_readers import read_ids

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
def test_run_a_pipeline_then_verify(tmp_path, driver_class_archive):
    pipeline = write(tmp_path, GOOD.replace("{ck}", str(tmp_path / "ck")).replace("{out}", str(tmp_path / "out"))
                     .replace("{{", "{").replace("}}", "}"))
    result = subprocess.run([sys.executable, "-m", "sparklink.cli.main", "run", str(pipeline), "--master", "local[2]"],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    # the transform keeps even ids: 200 rows read, 100 written (was reported as "files: 200 rows")
    assert "done: files: read numbers 200 rows; wrote 100 rows in 3 micro-batches" in result.stdout
    assert main(["verify", str(tmp_path / "out"), "--key", "id"]) == 0
    # the run ended with sparklink.files.finish: the files the 'default' policy carried are visible
    assert "finished files:" in result.stdout, result.stdout
    assert sorted(read_ids(tmp_path / "out", "json")) == list(range(0, 200, 2))


def test_check_prints_the_plan(spark, tmp_path, capsys):
    assert run_command.run(_args(str(_pipeline(tmp_path)), "--check"), spark=spark) == 0
    assert "sources numbers (sparklink.sequence) -> SQL transform -> sinks files (sparklink.files)" in \
        capsys.readouterr().out
    assert not (tmp_path / "out").exists() and not (tmp_path / "ck").exists()  # a check writes nothing
    bad_column = write(tmp_path, (tmp_path / "pipeline.toml").read_text().replace(
        'bucketAssigner = "basepath"', 'bucketAssigner = "column", bucketColumn = "nope"'))
    assert run_command.run(_args(str(bad_column), "--check"), spark=spark) == 1
    assert "'sinks[0].options': option 'bucketColumn': column 'nope' is not in the input" in capsys.readouterr().out


def _args(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["run", *argv])


def _pipeline(tmp_path, *, source_options: str | None = None, sql: str | None = None):
    text = GOOD.replace("{ck}", str(tmp_path / "ck")).replace("{out}", str(tmp_path / "out"))
    text = text.replace("{{", "{").replace("}}", "}")
    if source_options is not None:
        text = text.replace("options = { numSplits = 2, rowsPerSplit = 100, maxRowsPerTrigger = 80 }", source_options)
        text = text.replace('format = "sparklink.sequence"', 'format = "sparklink.files"\nschema = "id LONG, split LONG"')
    if sql is not None:
        text = text.replace("SELECT id, split FROM numbers WHERE id % 2 = 0", sql)
    return write(tmp_path, text)


def test_run_uses_spark_defaults_plus_the_pipeline_spark_table_and_not_the_test_harness():
    assert pipeline_settings(master="local[*]", app_name="p", conf={"spark.sql.shuffle.partitions": "64"}) == {
        "spark.master": "local[*]", "spark.app.name": "p", "spark.sql.shuffle.partitions": "64"}
    probe = ("import sys; import sparklink.cli.main, sparklink.cli.run_command, sparklink.cli.demo, "
             "sparklink.cli.spark_sessions, sparklink.cli.pipeline_check; "
             "print(sorted(m for m in sys.modules if m.startswith('sparklink.testing')))")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stdout.strip() == "[]", result.stdout + result.stderr
    for module in (run_command, demo):
        assert "sparklink.testing" not in inspect.getsource(module)


def test_check_names_a_misspelled_option_as_written_before_spark_starts(tmp_path, capsys):
    (tmp_path / "in").mkdir()
    pipeline = _pipeline(tmp_path, source_options=f'options = {{ path = "{tmp_path / "in"}", format = "json", '
                                                   'maxFilesPerTriger = 1 }')
    assert main(["run", str(pipeline), "--check"]) == 1
    out = capsys.readouterr().out
    assert "line 7: 'sources.numbers.options': option 'maxFilesPerTriger': unknown option (did you mean " \
           "'maxFilesPerTrigger'?)" in out, out
    assert "Traceback" not in out


def test_check_names_a_missing_source_path(tmp_path, capsys):
    pipeline = _pipeline(tmp_path, source_options=f'options = {{ path = "{tmp_path / "nowhere"}", format = "json" }}')
    assert main(["run", str(pipeline), "--check"]) == 1
    assert f"'sources.numbers.options': path '{tmp_path / 'nowhere'}' does not exist" in capsys.readouterr().out


def test_check_analyses_the_sql_without_starting_a_query(spark, tmp_path, capsys):
    bad = _pipeline(tmp_path, sql="SELECT id, no_such_column FROM numbers")
    assert run_command.run(_args(str(bad), "--check"), spark=spark) == 1
    out = capsys.readouterr().out
    assert "'transform.sql'" in out and "no_such_column" in out, out
    assert spark.streams.active == []
    assert not (tmp_path / "ck").exists() and not (tmp_path / "out").exists()


def test_a_failing_run_prints_the_cause_in_one_or_two_lines_and_the_trace_with_verbose(spark, tmp_path, capsys):
    landing = tmp_path / "in"
    landing.mkdir()
    (landing / "a.json").write_text('{"id": 1, "split": 0}\n{"id": oops}\n')
    pipeline = _pipeline(tmp_path, source_options=f'options = {{ path = "{landing}", format = "json", '
                                                   'mode = "FAILFAST", minFileAge = "0s" }')
    assert run_command.run(_args(str(pipeline)), spark=spark) == 1
    captured = capsys.readouterr()
    lines = captured.out.strip().splitlines()
    assert lines[1].startswith("sparklink run failed: DataError: ") and "a.json" in lines[1], captured.out
    assert len(lines) == 3 and "--verbose" in lines[2], captured.out
    assert "Traceback" not in captured.out + captured.err


def test_verbose_prints_the_full_trace(tmp_path, capsys):
    (tmp_path / "in").mkdir()
    pipeline = _pipeline(tmp_path, source_options=f'options = {{ path = "{tmp_path / "in"}", format = "json", '
                                                   'bogus = 1 }')
    assert main(["run", str(pipeline), "--check", "--verbose"]) == 1
    captured = capsys.readouterr()
    assert "option 'bogus': unknown option" in captured.out and "Traceback" in captured.err


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
    ('[sources.a]\nformat = "x"\noptions = { compaction.everyNCheckpoints = ["2"] }\n[[sinks]]\nformat = "y"\n'
     'checkpoint = "c"\n',
     r"line 3: 'sources.a.options': option 'compaction.everyNCheckpoints' must be a string, number or boolean"),
], ids=["bad-trigger", "unknown-key", "missing-checkpoint", "missing-interval", "toml-syntax", "no-source",
        "list-option", "dotted-list-option"])
def test_bad_pipeline_files_name_the_key_and_line(tmp_path, text, message):
    with pytest.raises(PipelineError, match=message):
        load_pipeline(write(tmp_path, text))


def test_bad_file_exit_status(tmp_path, capsys):
    assert main(["run", str(tmp_path / "missing.toml")]) == 2
    assert "cannot be read" in capsys.readouterr().out


def test_check_refuses_a_sink_format_spark_does_not_know(spark, tmp_path, capsys):
    """Every sink format is resolved as Spark resolves it when the query starts: a sparklink
    name that does not exist is refused before Spark starts, any other name through Spark's
    registry of Python data sources and its class path."""
    text = (GOOD.replace("{ck}", str(tmp_path / "ck")).replace("{out}", str(tmp_path / "out"))
            .replace("{{", "{").replace("}}", "}").replace('format = "sparklink.files"', 'format = "sparklink.filez"'))
    nosuch = write(tmp_path, text)
    assert main(["run", str(nosuch), "--check"]) == 1
    assert "'sinks[0].format': 'sparklink.filez' is not a sparklink format (did you mean 'sparklink.files'?)" \
        in capsys.readouterr().out
    other = write(tmp_path, text.replace("sparklink.filez", "nosuch.format"))
    assert run_command.run(_args(str(other), "--check"), spark=spark) == 1
    assert "'sinks[0].format': 'nosuch.format' is not a data source Spark knows" in capsys.readouterr().out
    spark_own = write(tmp_path, text.replace("sparklink.filez", "parquet")
                      .replace('bucketAssigner = "basepath"', 'compression = "snappy"').replace('format = "json", ', ''))
    assert run_command.run(_args(str(spark_own), "--check"), spark=spark) == 0


def test_an_unquoted_dotted_option_key_is_the_dotted_option(tmp_path):
    text = GOOD.replace("{ck}", "ck").replace("{out}", "out").replace("{{", "{").replace("}}", "}")
    text = text.replace('bucketAssigner = "basepath"', 'bucketAssigner = "basepath", compaction.everyNCheckpoints = 2')
    spec = load_pipeline(write(tmp_path, text))
    assert spec.sinks[0].options["compaction.everyNCheckpoints"] == "2"
