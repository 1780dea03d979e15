"""``sparklink.register`` on a Spark Connect session gives what it gives a classic one: every
format, the ``df.write`` default mode, the same one-line errors; and no JVM attribute of the
session is touched on the way (a Connect session has none)."""

from __future__ import annotations

import pyarrow.dataset as pa_dataset
import pytest

import sparklink
from tests.connect.conftest import sparklink_error_line


def test_register_write_read_and_finish_touch_no_jvm_attribute(connect_spark, tmp_path, jvm_attributes_touched):
    """(A stream's end of input and ``spark.stop()``: test_connect_end_of_input.py; ``run --check``:
    test_cli_remote.py; the same recording.)"""
    touched = jvm_attributes_touched
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


def test_the_warm_up_fills_the_shared_environment_map(spark, connect_spark, caplog):
    """The warm-up of :mod:`sparklink.spark.connect` (``register`` on a Connect session), tested
    directly. Its effect is on the server's JVM, which a Connect client cannot look into, so the
    map is read where it can be: in the classic session, a format registered as PySpark
    registers it has none of the keys in its environment map, and after :func:`warm_streaming_sources` (the
    function ``register`` runs on a Connect session) it holds the four keys Spark's streaming
    source runner adds, put by Spark's own runner. Through Connect, ``register_data_source``
    (``sparklink.register``'s path) runs a warm-up query per format on the server whose source
    was started (the probe's stream reader refused the warm-up option: Spark's runner put the
    keys before it started that reader's worker), and leaves no query running and the session's
    settings as they were."""
    from sparklink.spark.connect import warm_streaming_sources
    from sparklink.spark.registration import STREAMING_SOURCE_RUNNER_KEYS, register_data_source, registered_environment
    from tests.connect.warm_up_probe import REFUSAL, WarmUpProbe

    keys = set(STREAMING_SOURCE_RUNNER_KEYS)
    spark.dataSource.register(WarmUpProbe)
    assert keys.isdisjoint(registered_environment(spark, WarmUpProbe.name()))
    warm_streaming_sources(spark, [WarmUpProbe.name()])
    assert keys <= set(registered_environment(spark, WarmUpProbe.name()))

    force_delete = "spark.sql.streaming.forceDeleteTempCheckpointLocation"
    before = connect_spark.conf.get(force_delete, None)
    with caplog.at_level("DEBUG", logger="sparklink.connect"):
        register_data_source(connect_spark, WarmUpProbe)
    ended = [r.getMessage() for r in caplog.records if r.getMessage().startswith("warm-up of")]
    assert len(ended) == 1 and REFUSAL in ended[0], ended
    assert connect_spark.streams.active == []
    assert connect_spark.conf.get(force_delete, None) == before
