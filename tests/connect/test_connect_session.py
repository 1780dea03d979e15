"""``sparklink.register`` on a Spark Connect session gives what it gives a classic one: every
format, the ``df.write`` default mode, the same one-line errors; and no JVM attribute of the
session is touched on the way (a Connect session has none)."""

from __future__ import annotations

import pyarrow.dataset as pa_dataset
import pytest

import sparklink
from tests.connect.conftest import sparklink_error_line

JVM_ATTRIBUTES = {"sparkContext", "_jsc", "_jvm", "_jsparkSession", "_jconf"}


def test_register_write_read_and_finish_touch_no_jvm_attribute(connect_spark, tmp_path, monkeypatch):
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    touched: list[str] = []
    original = ConnectSession.__getattr__

    def recording(self, name):
        if name in JVM_ATTRIBUTES:
            touched.append(name)
        return original(self, name)

    monkeypatch.setattr(ConnectSession, "__getattr__", recording)
    sparklink.register(connect_spark)
    out = str(tmp_path / "out")
    # no .mode(): sparklink's default (append) on Connect's own DataFrameWriter
    connect_spark.range(0, 100, 1, 2).write.format("sparklink.files").option("path", out).option("format", "parquet") \
        .option("bucketAssigner", "basepath").save()
    assert connect_spark.read.format("sparklink.files").option("path", out).option("format", "parquet") \
        .schema("id long").load().count() == 100
    sparklink.files.finish(connect_spark, out)
    assert touched == []
    assert sorted(pa_dataset.dataset(out, format="parquet").to_table().column("id").to_pylist()) == list(range(100))


def test_every_format_is_registered_in_both_kinds_of_session(spark, connect_spark):
    """A read with no options reaches each format's own option check (an unregistered format
    would be Spark's DATA_SOURCE_NOT_FOUND), with the same message in both sessions; a format
    that reads with no options (the example sequence source) reads the same rows."""
    said = {}
    for session_kind, session in (("classic", spark), ("connect", connect_spark)):
        for cls in sparklink.data_sources():
            try:
                said[session_kind, cls.name()] = f"rows: {session.read.format(cls.name()).load().count()}"
            except Exception as exc:  # noqa: BLE001 - Spark's exception types differ per session kind
                said[session_kind, cls.name()] = sparklink_error_line(exc)
    for cls in sparklink.data_sources():
        classic, connect = said["classic", cls.name()], said["connect", cls.name()]
        assert "ConfigError" in classic or classic.startswith("rows: "), classic
        assert classic == connect


@pytest.mark.parametrize("case", ["unknown option", "wrong path"])
def test_bad_input_gives_the_same_one_line_error(spark, connect_spark, tmp_path, case):
    options = {"path": str(tmp_path / "in"), "format": "json"}
    (tmp_path / "in").mkdir()
    if case == "unknown option":
        options["maxFilesPerTriger"] = "1"
        expected = "maxFilesPerTriger"
    else:
        options["path"] = str(tmp_path / "nowhere")
        expected = str(tmp_path / "nowhere")
    lines = []
    for session in (spark, connect_spark):
        with pytest.raises(Exception) as raised:  # noqa: B017 - Spark's exception types differ per session kind
            session.read.format("sparklink.files").options(**options).schema("id long").load().collect()
        line = sparklink_error_line(raised.value)
        assert "\n" not in line and expected.lower() in line.lower(), line
        lines.append(line)
    assert lines[0] == lines[1]
