"""File sink pieces without Spark: options, assigners, policies, formats, state, compaction."""

from __future__ import annotations

import datetime as dt
import decimal
import functools
import io
import tempfile
from pathlib import Path

import fastavro
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq
import pytest

from sparklink.storage.directory import as_directory
from sparklink.errors import CommitError, ConfigError, DataError
from sparklink.files.sink.bucket_assigners import (NULL_BUCKET, BasePathBucketAssigner, CallableBucketAssigner,
                                                   ColumnBucketAssigner, DateTimeBucketAssigner, check_bucket_id,
                                                   java_pattern_to_strftime)
from sparklink.files.sink.compaction import FileCompactStrategy, concat_into, record_wise_compact
from sparklink.files.sink.connector import FileSinkConfig
from sparklink.formats.avro import avro_schema
from sparklink.formats.config import FormatConfig
from sparklink.files.sink.output_file_config import OutputFileConfig
from sparklink.files.sink.part_files import IN_PROGRESS, PENDING, PartFile, parse_in_progress
from sparklink.storage.local import LocalStorage
from sparklink.storage.local_recoverable import LocalRecoverableWriter, truncate_to
from sparklink.storage.recoverable import COPY_CHUNK, PartStream
from sparklink.files.sink.rolling_policies import DefaultRollingPolicy, OnCheckpointRollingPolicy
from sparklink.files.sink.state import SinkState, StateStore, empty_state, next_state

# ------------------------------------------------------------------------------ options


@pytest.mark.parametrize(("options", "match"), [
    ({}, "option 'path': is required"),
    ({"path": "/o", "format": "xml"}, r"option 'format': unknown value 'xml' \(accepted: text, json, csv, parquet"),
    ({"path": "/o", "bucketAssigner": "hash"}, r"option 'bucketAssigner': unknown value 'hash' \(accepted: datetime"),
    ({"path": "/o", "bucketAssigner": "column"}, "option 'bucketColumn': is required"),
    ({"path": "/o", "bucketAssigner": "basepath", "bucketColumn": "x"}, "option 'bucketColumn': does not apply"),
    ({"path": "/o", "bucketAssigner": "basepath", "bucketFormat": "yyyy"}, "option 'bucketFormat': applies to"),
    ({"path": "/o", "bucketFormat": "yyyy-QQ"}, "option 'bucketFormat': 'yyyy-QQ': 'QQ' is not supported"),
    ({"path": "/o", "bucketFormat": "'..'"}, "option 'bucketFormat'.*'\\.\\.'"),
    ({"path": "/o", "bucketTimezone": "Mars/Olympus"}, "option 'bucketTimezone': 'Mars/Olympus' is not a known"),
    ({"path": "/o", "rollingPolicy": "daily"}, r"option 'rollingPolicy': unknown value 'daily' \(accepted: checkpoint, default\)"),
    ({"path": "/o", "format": "parquet", "rollingPolicy": "default"}, "option 'rollingPolicy': 'default' carries files"),
    ({"path": "/o", "format": "parquet", "inactivityInterval": "-1min"}, "option 'inactivityInterval': '-1min' is not a duration"),
    ({"path": "/o", "format": "json", "maxPartSize": "lots"}, "option 'maxPartSize': 'lots' is not a size"),
    ({"path": "/o", "format": "json", "rolloverInterval": "soon"}, "option 'rolloverInterval': 'soon' is not a duration"),
    ({"path": "/o", "format": "parquet", "compression": "lzma"}, r"option 'compression': 'lzma' is not a parquet codec \(accepted: snappy, zstd, gzip"),
    ({"path": "/o", "format": "json", "compression": "gzip"}, "option 'compression': format 'json' is written uncompressed"),
    ({"path": "/o", "format": "json", "header": "true"}, "option 'header': applies to format 'csv'"),
    ({"path": "/o", "format": "orc", "rowGroupSize": "10rows"}, "option 'rowGroupSize': rows apply to format 'parquet'; orc stripes"),
    ({"path": "/o", "format": "json", "rowGroupSize": "1MB"}, "option 'rowGroupSize': applies to formats parquet, orc, avro"),
    ({"path": "/o", "format": "parquet", "rowGroupSize": "many"}, "option 'rowGroupSize': 'many' is not a size or a number of rows"),
    ({"path": "/o", "format": "csv", "writeBufferSize": "1MB"}, "option 'writeBufferSize': applies to formats parquet"),
    ({"path": "/o", "partPrefix": ".hidden"}, "option 'partPrefix': '.hidden' is not usable"),
    ({"path": "/o", "partSuffix": "/x"}, "option 'partSuffix': '/x' is not usable"),
    ({"path": "/o", "compaction.everyNCheckpoints": "0"}, "option 'compaction.everyNCheckpoints': must be at least 1"),
    ({"path": "/o", "compaction.sizeThreshold": "big"}, "option 'compaction.sizeThreshold': 'big' is not a size"),
    ({"path": "/o", "bucketAssigner": "custom"}, "option 'bucketAssigner': 'custom' is set by FileSink.with_bucket_assigner"),
    ({"path": "/o", "colour": "red"}, "option 'colour': unknown option"),
], ids=["no-path", "format", "assigner", "column-missing", "column-basepath", "format-basepath", "pattern",
        "pattern-escapes", "timezone", "policy", "bulk-default", "bulk-inactivity", "size", "duration", "codec",
        "row-codec", "header-json", "rowgroup-orc", "rowgroup-json", "rowgroup-bad", "buffer-csv", "prefix", "suffix", "every-n", "threshold", "custom", "unknown"])
def test_bad_options_are_refused_naming_the_option(options, match):
    with pytest.raises(ConfigError, match=match):
        FileSinkConfig.from_options(options)


def test_the_design_example_options_are_accepted():
    """The public API (ARCHITECTURE.md) writes one chain with every file sink option; it must be accepted."""
    config = FileSinkConfig.from_options({
        "path": "/out", "checkpointLocation": "/ck", "format": "parquet", "bucketAssigner": "datetime",
        "bucketColumn": "event_time", "bucketFormat": "'dt='yyyy-MM-dd/'hour='HH", "bucketTimezone": "UTC",
        "rollingPolicy": "checkpoint", "maxPartSize": "128MB", "rolloverInterval": "15min",
        "inactivityInterval": "5min", "partPrefix": "part", "partSuffix": ".parquet",
        "compaction.sizeThreshold": "64MB", "compaction.everyNCheckpoints": "5"})
    assert config.rolling_policy == OnCheckpointRollingPolicy(max_part_size=128 << 20, rollover_interval=900.0,
                                                              inactivity_interval=300.0)


def test_options_defaults_follow_flink():
    config = FileSinkConfig.from_options({"PATH": "/o", "Format": "JSON", "maxPartSize": "1MB",
                                          "rolloverInterval": "15min", "inactivityInterval": "5min",
                                          "checkpointLocation": "/ck"})
    assert config.format.name == "json"
    assert config.rolling_policy == DefaultRollingPolicy(max_part_size=1 << 20, rollover_interval=900.0,
                                                         inactivity_interval=300.0)
    assert isinstance(config.assigner, DateTimeBucketAssigner) and config.assigner.format == "'dt='yyyy-MM-dd/'hour='HH"
    assert FileSinkConfig.from_options({"path": "/o"}).rolling_policy == OnCheckpointRollingPolicy()
    assert config.compaction is None


# ------------------------------------------------------------------------------ bucket assigners


@pytest.mark.parametrize(("java", "strftime"), [
    ("yyyy-MM-dd--HH", "%Y-%m-%d--%H"),
    ("yyyy/MM/dd", "%Y/%m/%d"),
    ("'year='yyyy'/month='MM", "year=%Y/month=%m"),
    ("yy_DDD mm:ss", "%y_%j %M:%S"),
], ids=["flink-default", "nested", "quoted-hive", "other-fields"])
def test_java_patterns_translate_to_strftime(java, strftime):
    assert java_pattern_to_strftime(java) == strftime


@pytest.mark.parametrize("bucket", ["/etc", "..", "a/../b", "a//b", ".hidden", "a/_tmp", "C:/x"],
                         ids=["absolute", "dotdot", "inner-dotdot", "empty-segment", "hidden", "underscore", "drive"])
def test_bucket_ids_that_escape_or_hide_are_refused(bucket):
    with pytest.raises(DataError, match=f"bucket id '{bucket}'"):
        check_bucket_id(bucket, "test")


def _split(assigner, batch, now=0.0):
    return {bucket: rows.column(0).to_pylist() for bucket, rows in assigner.split(batch, now)}


def test_datetime_assigner_uses_event_time_in_the_time_zone():
    stamps = pa.array([0, 3_600_000_000, None, 1_000], pa.timestamp("us", tz="UTC"))
    batch = pa.record_batch({"id": [0, 1, 2, 3], "ts": stamps})
    assigner = DateTimeBucketAssigner(column="ts", timezone="Asia/Tokyo")
    null_hive = "dt=__HIVE_DEFAULT_PARTITION__/hour=__HIVE_DEFAULT_PARTITION__"  # Spark reads it back as null
    assert _split(assigner, batch) == {"dt=1970-01-01/hour=09": [0, 3], "dt=1970-01-01/hour=10": [1], null_hive: [2]}
    flink = assigner.with_format("yyyy-MM-dd--HH")
    assert _split(flink, batch) == {"1970-01-01--09": [0, 3], "1970-01-01--10": [1], NULL_BUCKET: [2]}


@pytest.mark.parametrize("zone", ["UTC", "Europe/Paris", "Asia/Kolkata", "Australia/Lord_Howe", "America/St_Johns",
                                  "Europe/Amsterdam", "+05:45", None])
def test_datetime_assigner_keys_equal_formatting_every_value(zone):
    """Keys are formatted once per hour or minute where the zone's offset allows it: the same keys
    as formatting each value, across daylight-saving changes (Paris; Lord Howe shifts by 30
    minutes), half-hour zones, local mean times of the 1900s (offsets with seconds), sub-second
    values, nulls and sliced batches."""
    rng = np.random.default_rng(3)
    micros = np.concatenate([rng.integers(-3_000_000_000, 4_000_000_000, 3000) * 1_000_000
                             + rng.integers(0, 1_000_000, 3000),
                             1711846800_000000 + rng.integers(-7200, 7200, 1000) * 1_000_000,  # 2024-03-31 in Europe
                             1712415600_000000 + rng.integers(-7200, 7200, 1000) * 1_000_000])  # 2024-04-07, Lord Howe
    kind = pa.timestamp("us", tz=zone) if zone else pa.timestamp("us")  # no zone: TIMESTAMP_NTZ
    values = pa.array(micros, kind, mask=rng.random(len(micros)) < 0.05)
    for pattern in ["'dt='yyyy-MM-dd/'hour='HH", "yyyy-MM-dd--HH", "yyyy-MM-dd", "yyyy-MM-dd--HH-mm", "HH:mm:ss",
                    "EEE ww DDD MMM yy"]:
        assigner = DateTimeBucketAssigner(format=pattern, timezone=zone or "UTC", column="t")
        for part in (values, values.slice(7, 3000)):
            assert assigner._keys(part).equals(pc.strftime(part, format=assigner._strftime)), pattern


def test_datetime_assigner_without_column_uses_processing_time():
    batch = pa.record_batch({"id": [1, 2]})
    now = dt.datetime(2024, 5, 6, 7, 30, tzinfo=dt.timezone.utc).timestamp()
    assert _split(DateTimeBucketAssigner(format="yyyy/MM/dd"), batch, now) == {"2024/05/06": [1, 2]}


def test_datetime_assigner_accepts_epoch_millis_and_dates():
    batch = pa.record_batch({"id": [1], "ms": pa.array([86_400_000], pa.int64())})
    assert _split(DateTimeBucketAssigner(column="ms", format="yyyy-MM-dd"), batch) == {"1970-01-02": [1]}
    dates = pa.record_batch({"id": [1], "d": pa.array([dt.date(2020, 2, 29)])})
    assert _split(DateTimeBucketAssigner(column="d", format="yyyy-MM-dd"), dates) == {"2020-02-29": [1]}


@pytest.mark.parametrize(("hive", "expected"), [
    (False, {"a": [0, 2], "%2E.": [1], NULL_BUCKET: [3, 5], "x%2Fy": [4]}),
    (True, {"k=a": [0, 2], "k=%2E.": [1], "k=__HIVE_DEFAULT_PARTITION__": [3, 5], "k=x%2Fy": [4]}),
], ids=["plain", "hive"])
def test_column_assigner_escapes_values_and_sends_nulls_to_the_null_bucket(hive, expected):
    batch = pa.record_batch({"id": [0, 1, 2, 3, 4, 5], "k": ["a", "..", "a", None, "x/y", ""]})
    assert _split(ColumnBucketAssigner(column="k", hive_style=hive), batch) == expected


def test_basepath_and_callable_assigners():
    batch = pa.record_batch({"id": [1, 2, 3]})
    assert _split(BasePathBucketAssigner(), batch) == {"": [1, 2, 3]}
    odd_even = CallableBucketAssigner(function=lambda row: "odd" if row["id"] % 2 else None)
    assert _split(odd_even, batch) == {"odd": [1, 3], NULL_BUCKET: [2]}
    with pytest.raises(DataError, match="custom bucket assigner: bucket id '../x'"):
        CallableBucketAssigner(function=lambda row: "../x").split(batch, 0.0)


# ------------------------------------------------------------------------------ rolling policies


@pytest.mark.parametrize(("created", "written", "now", "rolls"), [
    (0, 40, 59, False), (0, 50, 60, True), (10, 50, 69, False), (0, 30, 65, True)],
    ids=["young", "rollover", "active", "inactive"])
def test_default_policy_rolls_on_time(created, written, now, rolls):
    policy = DefaultRollingPolicy(rollover_interval=60, inactivity_interval=30)
    assert policy.should_roll_on_time(created_at=created, last_write_at=written, now=now) is rolls


def test_policies_roll_on_size():
    assert DefaultRollingPolicy(max_part_size=10).should_roll_on_size(10)
    assert not DefaultRollingPolicy(max_part_size=10).should_roll_on_size(9)
    assert not OnCheckpointRollingPolicy().should_roll_on_size(1 << 40)
    assert OnCheckpointRollingPolicy(max_part_size=5).should_roll_on_size(5)
    assert not OnCheckpointRollingPolicy().carries_across_batches and DefaultRollingPolicy().carries_across_batches


# ------------------------------------------------------------------------------ formats

SAMPLE = pa.record_batch({
    "id": pa.array([1, None], pa.int64()),
    "name": ["a,b", None],
    "ts": pa.array([0, 1_000_000], pa.timestamp("us", tz="UTC")),
})


@pytest.mark.parametrize(("fmt", "expected"), [
    ("json", b'{"id":1,"name":"a,b","ts":"1970-01-01T00:00:00.000Z"}\n{"ts":"1970-01-01T00:00:01.000Z"}\n'),
    ("csv", b'1,"a,b",1970-01-01T00:00:00.000Z\n,,1970-01-01T00:00:01.000Z\n'),
], ids=["json", "csv"])
def test_row_encoders(fmt, expected):
    assert FormatConfig(name=fmt).row_encoder(SAMPLE.schema).encode(SAMPLE) == expected


# What Spark's own writers (PySpark 4.3, session time zone UTC) wrote for these rows: the JSON
# and CSV encoders follow their conventions (null fields left out, timestamps
# yyyy-MM-dd'T'HH:mm:ss.SSSXXX, decimals as numbers, doubles as Java prints them, '\' as the CSV
# escape). Two differences on purpose, in CSV: a value holding a '\' is quoted (Spark leaves
# `back\slash` bare, which a reader whose escape is '\' would read as `backslash`), and control
# characters are kept (Spark's writer drops them, and trims leading and trailing blanks).
SPARK_ROWS = pa.record_batch({
    "id": pa.array([1, None, 3, 4, 5, 6, 7, 9, 10], pa.int64()),
    "s": ["plain", "a,b", 'q"x', "back\\slash", 'bs\\"q', "nl\nx", "", "ctl\x01x", None],
    "v": pa.array([1.0, 1.5e7, 1.5e-7, float("nan"), float("inf"), -0.0, 123456.789, 1e-4, 9999999.0]),
    "amount": pa.array([decimal.Decimal("1.50"), decimal.Decimal("0.00"), None, decimal.Decimal("-1.50")] + [None] * 5,
                       pa.decimal128(12, 2)),
    "ts": pa.array([1_700_018_531_123_456, -100] + [None] * 7, pa.timestamp("us", tz="UTC")),
    "d": pa.array([19_676] + [None] * 8, pa.date32()),
    "b": pa.array([True, None, False] + [None] * 6),
    "ntz": pa.array([1_700_018_531_000_000, None, 1_700_018_531_500_000] + [None] * 6, pa.timestamp("us")),
})
SPARK_JSON = rb"""{"id":1,"s":"plain","v":1.0,"amount":1.50,"ts":"2023-11-15T03:22:11.123Z","d":"2023-11-15","b":true,"ntz":"2023-11-15T03:22:11.000"}
{"s":"a,b","v":1.5E7,"amount":0.00,"ts":"1969-12-31T23:59:59.999Z"}
{"id":3,"s":"q\"x","v":1.5E-7,"b":false,"ntz":"2023-11-15T03:22:11.500"}
{"id":4,"s":"back\\slash","v":"NaN","amount":-1.50}
{"id":5,"s":"bs\\\"q","v":"Infinity"}
{"id":6,"s":"nl\nx","v":-0.0}
{"id":7,"s":"","v":123456.789}
{"id":9,"s":"ctl\u0001x","v":1.0E-4}
{"id":10,"v":9999999.0}
"""
SPARK_CSV = b"""1,plain,1.0,1.50,2023-11-15T03:22:11.123Z,2023-11-15,true,2023-11-15T03:22:11.000
,"a,b",1.5E7,0.00,1969-12-31T23:59:59.999Z,,,
3,"q\\"x",1.5E-7,,,,false,2023-11-15T03:22:11.500
4,"back\\\\slash",NaN,-1.50,,,,
5,"bs\\\\\\"q",Infinity,,,,,
6,"nl
x",-0.0,,,,,
7,"",123456.789,,,,,
9,ctl\x01x,1.0E-4,,,,,
10,,9999999.0,,,,,
"""


@pytest.mark.parametrize(("fmt", "expected"), [("json", SPARK_JSON), ("csv", SPARK_CSV)], ids=["json", "csv"])
def test_row_encoders_write_as_spark_writes(fmt, expected):
    encoder = FormatConfig(name=fmt).row_encoder(SPARK_ROWS.schema)
    assert encoder.encode(SPARK_ROWS) == expected
    assert b"".join(encoder.encode(SPARK_ROWS.slice(i, 2)) for i in range(0, 9, 2)) == expected  # slices too


def test_json_encoder_fast_paths_read_back_as_the_values():
    """The shortcuts (escape scan bounded to a slice's bytes, doubles without integral values,
    the fixed-layout 'T', a first field left out) give lines Python's json reads back as the
    values, on slices too."""
    import json

    table = pa.table({
        "v": pa.array([0.5, 2.0, None, 1e20, 3.25], pa.float64()),
        "s": ["plain", 'quo"te', "back\\slash", None, "tab\t"],
        "ts": pa.array([0, 1_500_000, None, -62_135_596_800_000_000, 253_402_300_799_000_000],
                       pa.timestamp("us", tz="UTC")),
    })
    encoder = FormatConfig(name="json").row_encoder(table.schema)
    for start, length in ((0, 5), (0, 1), (1, 2), (3, 2)):
        batch = table.slice(start, length).to_batches()[0]
        lines = bytes(encoder.encode(batch)).decode().splitlines()
        for line, row in zip(lines, batch.to_pylist(), strict=True):
            decoded = json.loads(line)
            assert decoded.get("v") == row["v"] and decoded.get("s") == row["s"]
            expected = None if row["ts"] is None else row["ts"].strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3].rjust(23, "0") + "Z"
            assert decoded.get("ts") == expected
            assert type(decoded.get("v")) is (float if row["v"] is not None else type(None))
    no_fraction = pa.record_batch({"v": pa.array([1.5, 2.25])})  # no integral value: no ".0" suffix
    assert FormatConfig(name="json").row_encoder(no_fraction.schema).encode(no_fraction) == b'{"v":1.5}\n{"v":2.25}\n'


def test_text_encoder_and_csv_header():
    lines = pa.record_batch({"value": ["x", None, "z"]})
    assert FormatConfig(name="text").row_encoder(lines.schema).encode(lines.slice(1)) == b"\nz\n"
    assert FormatConfig(name="csv", header=True).row_encoder(SAMPLE.schema).header() == b"id,name,ts\n"
    with pytest.raises(ConfigError, match="format 'text' writes one string column"):
        FormatConfig(name="text").validate(SAMPLE.schema)


@pytest.mark.parametrize(("fmt", "codec"), [("parquet", "zstd"), ("parquet", "none"), ("orc", "zlib"),
                                            ("avro", "deflate"), ("avro", "null")],
                         ids=["parquet-zstd", "parquet-none", "orc-zlib", "avro-deflate", "avro-null"])
def test_bulk_writers_round_trip(tmp_path, fmt, codec):
    config = FormatConfig(name=fmt, compression=codec)
    writer = config.bulk_writer(tmp_path / "f", SAMPLE.schema)
    writer.write_batch(SAMPLE)
    writer.write_batch(SAMPLE)
    length = writer.close()
    assert length == (tmp_path / "f").stat().st_size
    from tests.files.sink_readers import read_records

    records = read_records(tmp_path / "f", fmt)
    assert [r["id"] for r in records] == [1, None, 1, None]
    if fmt == "parquet":
        assert pq.ParquetFile(tmp_path / "f").metadata.row_group(0).column(0).compression == codec.upper().replace("NONE", "UNCOMPRESSED")
    if fmt == "avro":
        with open(tmp_path / "f", "rb") as handle:
            assert fastavro.reader(handle).codec == codec


def test_avro_schema_refuses_unsupported_types():
    schema = pa.schema([pa.field("m", pa.map_(pa.int32(), pa.int32()))])
    with pytest.raises(ConfigError, match="format 'avro' cannot write column 'm'"):
        avro_schema(schema)


# ------------------------------------------------------------------------------ part files and state


def _part(path, state=PENDING, **kw):
    values = dict(bucket="b", partition=0, path=f"b/.{path}.inprogress.s1", final=f"b/{path}", state=state,
                  length=10, rows=1, created_at=0.0, last_write_at=0.0)
    values.update(kw)
    return PartFile(**values)


def test_part_file_and_state_round_trip(tmp_path):
    part = _part("part-u-0.json", base_path="b/.old", base_length=4, in_place=True)
    assert PartFile.from_json(part.to_json()) == part
    assert parse_in_progress(".part-u-0.json.inprogress.s1") == ("part-u-0.json", "s1")
    assert parse_in_progress("part-u-0.json") is None
    store = StateStore(as_directory(tmp_path))
    state = next_state(empty_state(), 4, [part, _part("part-u-1.json", state=IN_PROGRESS)], now=1.0,
                       rolling_policy=DefaultRollingPolicy(), compaction=FileCompactStrategy(every_n_checkpoints=3),
                       plan_name=lambda b, i: (f"{b}/.c.inprogress.scompact", f"{b}/c"))
    store.put(state)
    assert store.get(4) == state and store.latest_before(None) == state and store.latest_before(4) == empty_state()
    with pytest.raises(CommitError, match="version"):
        SinkState.from_json({"v": 99}, source="x")


def test_next_state_carries_rolls_and_supersedes():
    policy = DefaultRollingPolicy(rollover_interval=100, inactivity_interval=50)
    previous = SinkState(batch_id=0, committed_at=0, in_progress=[
        _part("old-0", state=IN_PROGRESS, partition=0),
        _part("old-1", state=IN_PROGRESS, partition=1, last_write_at=0.0),
        _part("old-2", state=IN_PROGRESS, partition=2, last_write_at=40.0)])
    continued = _part("old-0", state=IN_PROGRESS, partition=0, length=20, base_path="b/.old-0.inprogress.s1",
                      in_place=True, last_write_at=60.0)
    copied = _part("new-2", state=IN_PROGRESS, partition=2, base_path="b/.old-2.inprogress.s1", in_place=False,
                   last_write_at=60.0)
    state = next_state(previous, 1, [continued, copied], now=60.0, rolling_policy=policy, compaction=None,
                       plan_name=None)
    assert [f.path for f in state.in_progress] == ["b/.new-2.inprogress.s1", "b/.old-0.inprogress.s1"]
    assert [f.path for f in state.finish] == ["b/.old-1.inprogress.s1"]  # inactive for 60 s: rolled on the driver
    assert state.obsolete == ["b/.old-2.inprogress.s1"]


@pytest.mark.parametrize(("strategy", "batches_until_compaction"), [
    (FileCompactStrategy(every_n_checkpoints=3), 3),
    (FileCompactStrategy(size_threshold=20), 2),
    (FileCompactStrategy(size_threshold=1000, every_n_checkpoints=4), 4),
], ids=["checkpoints", "size", "checkpoints-first"])
def test_compaction_triggers(strategy, batches_until_compaction):
    state = empty_state()
    for batch in range(batches_until_compaction):
        assert not state.compactions
        state = next_state(state, batch, [_part(f"p{batch}")], now=0.0, rolling_policy=OnCheckpointRollingPolicy(),
                           compaction=strategy, plan_name=lambda b, i: (f"{b}/.c.inprogress.scompact", f"{b}/c"))
    assert [len(c.inputs) for c in state.compactions] == [batches_until_compaction]
    assert not state.held and not state.finish


def test_truncate_refuses_a_file_shorter_than_recorded(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"0123456789")
    truncate_to(path, 4)
    assert path.read_bytes() == b"0123"
    with pytest.raises(CommitError, match="fewer than the 8 the last commit recorded"):
        truncate_to(path, 8)


# ------------------------------------------------------------------------------ compactors


def _concat_local(tmp_path, inputs, header: bytes) -> bytes:
    """``concat_into`` a new local part file (the kernel's copy) and, for comparison, a memory
    one (the copy through Python); both must hold the same bytes, which are returned."""
    record = PartFile(bucket="", partition=-1, path=".out.inprogress", final="out", state=PENDING, length=0, rows=0,
                      created_at=0.0, last_write_at=0.0)
    local, memory = LocalRecoverableWriter(LocalStorage(tmp_path)).open(record), _MemoryStream()
    for stream in (local, memory):
        concat_into(stream, [(name, lambda name=name: pa.OSFile(str(tmp_path / name), "rb"), length)
                             for name, length in inputs], header=header)
        stream.close()
    copied = (tmp_path / ".out.inprogress").read_bytes()
    assert copied == memory.data
    return copied


class _MemoryStream(PartStream):
    def __init__(self):
        self.data = b""

    def write(self, data):
        self.data += bytes(data)

    def tell(self):
        return len(self.data)

    def bulk_target(self):
        raise AssertionError("row formats only")

    def close(self):
        pass

    def persist(self, owner):
        pass

    def discard(self):
        pass


def test_concat_compactor_keeps_the_csv_header_once(tmp_path):
    header = b'"id"\n'
    (tmp_path / "a").write_bytes(header + b"1\n2\n")
    (tmp_path / "b").write_bytes(header + b"3\nGARBAGE")
    out = _concat_local(tmp_path, [("a", 9), ("b", 7)], header)
    assert out == b'"id"\n1\n2\n3\n'
    assert pa_csv.read_csv(io.BytesIO(out)).column("id").to_pylist() == [1, 2, 3]


def test_concat_compactor_copies_large_inputs_at_their_recorded_length_and_refuses_a_short_one(tmp_path):
    first, second = bytes(range(256)) * 40_000, b"x" * (COPY_CHUNK + 5)  # the second crosses a chunk
    (tmp_path / "a").write_bytes(first + b"appended by an attempt no commit named")
    (tmp_path / "b").write_bytes(second)
    assert _concat_local(tmp_path, [("a", len(first)), ("b", len(second))], b"") == first + second
    with pytest.raises(CommitError, match="compaction input b is shorter than the"):
        _concat_local(tmp_path, [("a", len(first)), ("b", len(second) + 1)], b"")


def test_concat_compactor_copies_across_file_systems(tmp_path):
    """From tmpfs to the output's file system the kernel refuses to copy (EXDEV): the bytes go
    through Python instead, the same bytes."""
    data = bytes(range(256)) * 1000
    with tempfile.TemporaryDirectory(dir="/dev/shm") as other:
        (Path(other) / "a").write_bytes(data + b"uncommitted")
        record = PartFile(bucket="", partition=-1, path=".out.inprogress", final="out", state=PENDING, length=0,
                          rows=0, created_at=0.0, last_write_at=0.0)
        stream = LocalRecoverableWriter(LocalStorage(tmp_path)).open(record)
        concat_into(stream, [("a", lambda: pa.OSFile(str(Path(other) / "a"), "rb"), len(data))], header=b"")
        stream.close()
    assert (tmp_path / ".out.inprogress").read_bytes() == data


@pytest.mark.parametrize("fmt", ["parquet", "orc", "avro"])
def test_record_wise_compactor_keeps_schema_and_codec(tmp_path, fmt):
    config = FormatConfig(name=fmt, compression={"parquet": "gzip", "orc": "zstd", "avro": "bzip2"}[fmt])
    inputs = []
    for index in range(3):
        writer = config.bulk_writer(tmp_path / f"in{index}", SAMPLE.schema)
        writer.write_batch(SAMPLE)
        writer.close()
        inputs.append(tmp_path / f"in{index}")
    record_wise_compact(config, [(str(path), functools.partial(pa.OSFile, str(path))) for path in inputs],
                        tmp_path / "out")
    from tests.files.sink_readers import read_records

    assert [r["id"] for r in read_records(tmp_path / "out", fmt)] == [1, None] * 3
    if fmt == "parquet":
        assert pq.read_schema(tmp_path / "out") == pq.read_schema(inputs[0])
        assert pq.ParquetFile(tmp_path / "out").metadata.row_group(0).column(0).compression == "GZIP"


def test_output_file_config_builder():
    config = OutputFileConfig.builder().with_part_prefix("events").with_part_suffix(".jsonl").build()
    assert config.to_options() == {"partPrefix": "events", "partSuffix": ".jsonl"}
    assert OutputFileConfig().suffix_for(".parquet") == ".parquet"
