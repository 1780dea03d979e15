"""Every format read through spark.read: text, CSV, JSON lines, Parquet, Avro, ORC, compressed
inputs, partition columns, large-file splits, schema inference and drift, and the bad-input
modes on a fuzzed corpus (truncated, wrong encoding, unbalanced quotes, zero-byte, drift)."""

from __future__ import annotations

import gzip
import os
import random
from pathlib import Path

import fastavro
import pyarrow as pa
import pyarrow.orc as orc
import pyarrow.parquet as pq
import pytest
from pyspark.errors import PySparkException
from pyspark.sql.utils import CapturedException

SPARK_ERRORS = (PySparkException, CapturedException, Exception)


def _read(spark, path, fmt, schema=None, **options):
    reader = spark.read.format("sparklink.files").option("path", str(path)).option("format", fmt)
    for key, value in options.items():
        reader = reader.option(key, str(value))
    if schema is not None:
        reader = reader.schema(schema)
    return reader.load()


def _rows(frame, *columns):
    return sorted((tuple(row[c] for c in columns) for row in frame.collect()),
                  key=lambda r: tuple((v is None, v if v is not None else 0) for v in r))


def _error_text(excinfo) -> str:
    return str(excinfo.value)


# ------------------------------------------------------------------------------ formats


def _write_format(directory: Path, fmt: str) -> None:
    table = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "name": ["a", "b", "c"]})
    if fmt == "parquet":
        pq.write_table(table, directory / "f.parquet")
    elif fmt == "orc":
        orc.write_table(table, str(directory / "f.orc"))
    elif fmt == "avro":
        schema = {"type": "record", "name": "r", "fields": [{"name": "id", "type": "long"},
                                                           {"name": "name", "type": ["null", "string"]}]}
        with open(directory / "f.avro", "wb") as handle:
            fastavro.writer(handle, schema, table.to_pylist())
    elif fmt == "csv":
        (directory / "f.csv").write_text("id,name\n1,a\n2,b\n3,c\n")
    elif fmt == "json":
        (directory / "f.json").write_text('{"id": 1, "name": "a"}\n{"id": 2, "name": "b"}\n{"id": 3, "name": "c"}\n')


@pytest.mark.parametrize("fmt", ["parquet", "orc", "avro"], ids=["parquet", "orc", "avro"])
def test_bulk_formats_infer_schema_from_metadata(spark, tmp_path, fmt):
    _write_format(tmp_path, fmt)
    frame = _read(spark, tmp_path, fmt)
    assert frame.schema.fieldNames() == ["id", "name"]
    assert _rows(frame, "id", "name") == [(1, "a"), (2, "b"), (3, "c")]


@pytest.mark.parametrize("fmt,options", [("csv", {"header": "true"}), ("json", {})], ids=["csv", "json"])
def test_text_formats_with_schema_and_inferred(spark, tmp_path, fmt, options):
    _write_format(tmp_path, fmt)
    given = _read(spark, tmp_path, fmt, "id long, name string", **options)
    assert _rows(given, "id", "name") == [(1, "a"), (2, "b"), (3, "c")]
    inferred = _read(spark, tmp_path, fmt, inferSchema="true", **options)
    assert dict(inferred.dtypes)["id"] == "bigint"
    assert _rows(inferred, "id", "name") == [(1, "a"), (2, "b"), (3, "c")]


def test_text_lines(spark, tmp_path):
    (tmp_path / "a.txt").write_bytes(b"one\r\ntwo\n\nthree")
    assert _rows(_read(spark, tmp_path, "text"), "value") == [("",), ("one",), ("three",), ("two",)]


def test_csv_dialect_multiline_quote_escape(spark, tmp_path):
    (tmp_path / "a.csv").write_text('id;note\n1;"multi\nline"\n2;\'it\\\'s\'\n3;"say ""hi"""\n')
    frame = _read(spark, tmp_path, "csv", "id long, note string", header="true", delimiter=";", multiLine="true")
    assert _rows(frame, "id", "note")[0] == (1, "multi\nline")
    assert _rows(frame, "id", "note")[2] == (3, 'say "hi"')
    quoted = tmp_path / "q"
    quoted.mkdir()
    (quoted / "b.csv").write_text("1|'it\\'s'\n")
    frame = _read(spark, quoted, "csv", "id long, note string", delimiter="|", quote="'", escape="\\")
    assert _rows(frame, "id", "note") == [(1, "it's")]


@pytest.mark.parametrize("suffix,opener", [(".gz", gzip.open), (".zst", None)], ids=["gzip", "zstd"])
@pytest.mark.parametrize("fmt", ["text", "csv", "json"], ids=["text", "csv", "json"])
def test_compressed_inputs(spark, tmp_path, fmt, suffix, opener):
    bodies = {"text": b"1\n2\n3\n", "csv": b"1,a\n2,b\n3,c\n",
              "json": b'{"id":1,"name":"a"}\n{"id":2,"name":"b"}\n{"id":3,"name":"c"}\n'}
    path = tmp_path / f"data{suffix}"
    if opener is not None:
        with opener(path, "wb") as handle:
            handle.write(bodies[fmt])
    else:
        with pa.CompressedOutputStream(str(path), "zstd") as handle:
            handle.write(bodies[fmt])
    schema = None if fmt == "text" else "id long, name string"
    frame = _read(spark, tmp_path, fmt, schema)
    assert frame.count() == 3


def test_hive_partition_columns(spark, tmp_path):
    for day in (1, 2):
        for country in ("fr", "de"):
            directory = tmp_path / f"day={day}" / f"country={country}"
            directory.mkdir(parents=True)
            pq.write_table(pa.table({"v": [day * 10]}), directory / "p.parquet")
    frame = _read(spark, tmp_path, "parquet")
    assert frame.dtypes == [("v", "bigint"), ("day", "bigint"), ("country", "string")]
    assert _rows(frame, "day", "country", "v") == [(1, "de", 10), (1, "fr", 10), (2, "de", 20), (2, "fr", 20)]


def test_hidden_temporary_and_glob_filtered_files_are_skipped(spark, tmp_path):
    for name in ("a.csv", "b.txt", ".hidden.csv", "_SUCCESS", "c.csv.tmp", "d.csv._COPYING_"):
        (tmp_path / name).write_text("1,x\n")
    (tmp_path / "_meta").mkdir()
    (tmp_path / "_meta" / "e.csv").write_text("1,x\n")
    frame = _read(spark, tmp_path, "csv", "id long, name string", pathGlobFilter="*.csv")
    assert frame.count() == 1


@pytest.mark.parametrize("fmt", ["csv", "json", "text", "parquet"], ids=["csv", "json", "text", "parquet"])
def test_one_large_file_is_split_and_read_exactly_once(spark, tmp_path, fmt):
    rows = 30_000
    if fmt == "parquet":
        pq.write_table(pa.table({"id": pa.array(range(rows), pa.int64())}), tmp_path / "big.parquet",
                       row_group_size=2_000)
        schema = None
    else:
        line = {"csv": "{i}\n", "text": "{i}\n", "json": '{{"id": {i}}}\n'}[fmt]
        (tmp_path / "big.dat").write_text("".join(line.format(i=i) for i in range(rows)))
        schema = "id long" if fmt != "text" else None
    frame = _read(spark, tmp_path, fmt, schema, maxSplitBytes="32KB")
    assert frame.rdd.getNumPartitions() >= 3
    column = "value" if fmt == "text" else "id"
    values = sorted(int(r[column]) for r in frame.collect())
    assert values == list(range(rows))


# ------------------------------------------------------------------------------ schema


def test_csv_and_json_need_a_schema_or_infer_schema(spark, tmp_path):
    _write_format(tmp_path, "csv")
    with pytest.raises(SPARK_ERRORS, match="needs a schema"):
        _read(spark, tmp_path, "csv").collect()


def test_parquet_schema_drift_names_both_files(spark, tmp_path):
    pq.write_table(pa.table({"id": pa.array([1], pa.int64())}), tmp_path / "a.parquet")
    os.utime(tmp_path / "a.parquet")
    pq.write_table(pa.table({"id": ["not-a-number"]}), tmp_path / "b.parquet")
    with pytest.raises(SPARK_ERRORS, match=r"schema drift: .*b\.parquet.*first file .*a\.parquet"):
        _read(spark, tmp_path, "parquet").collect()


def test_csv_header_drift_names_both_files(spark, tmp_path):
    (tmp_path / "a.csv").write_text("id,name\n1,a\n")
    (tmp_path / "b.csv").write_text("ident,label\n2,b\n")
    with pytest.raises(SPARK_ERRORS, match=r"schema drift: .*b\.csv has no column 'id'.*first file .*a\.csv"):
        _read(spark, tmp_path, "csv", "id long, name string", header="true").collect()


# ------------------------------------------------------------------------------ bad input

CSV_CORPUS = {
    "wrong_types": (b"1,a\nx,b\n3,c\n", 2),
    "field_count": (b"1,a\n2,b,extra\n3,c\n", 2),
    "bad_encoding": (b"1,a\n2,\xff\xfe\n3,c\n", 2),
    "unbalanced_quote": (b'1,a\n2,"b\n3,c\n', 2),
}


@pytest.mark.parametrize("case", sorted(CSV_CORPUS), ids=sorted(CSV_CORPUS))
@pytest.mark.parametrize("mode", ["PERMISSIVE", "DROPMALFORMED", "FAILFAST"], ids=["permissive", "drop", "failfast"])
def test_csv_parse_modes(spark, tmp_path, case, mode):
    body, bad_line = CSV_CORPUS[case]
    (tmp_path / "bad.csv").write_bytes(body)
    frame = _read(spark, tmp_path, "csv", "id long, name string, _corrupt_record string", mode=mode)
    if mode == "FAILFAST":
        with pytest.raises(SPARK_ERRORS, match=rf"bad\.csv: malformed record at line {bad_line} \(byte offset 4\)"):
            frame.collect()
        return
    rows = _rows(frame, "id", "name", "_corrupt_record")
    good = [(1, "a", None), (3, "c", None)]
    if mode == "DROPMALFORMED":
        assert rows == good
    else:
        assert len(rows) == 3 and [r for r in rows if r[2] is None] == good
        assert [r for r in rows if r[2] is not None][0][2].startswith("2,") or case == "wrong_types"


JSON_CORPUS = {
    "bad_json": (b'{"id": 1}\n{"id": 2,\n{"id": 3}\n', 2),
    "wrong_type": (b'{"id": 1}\n{"id": "two"}\n{"id": 3}\n', 2),
    "not_object": (b'{"id": 1}\n[2]\n{"id": 3}\n', 2),
    "bad_encoding": (b'{"id": 1}\n{"id": "\xff"}\n{"id": 3}\n', 2),
}


@pytest.mark.parametrize("case", sorted(JSON_CORPUS), ids=sorted(JSON_CORPUS))
@pytest.mark.parametrize("mode", ["PERMISSIVE", "DROPMALFORMED", "FAILFAST"], ids=["permissive", "drop", "failfast"])
def test_json_parse_modes(spark, tmp_path, case, mode):
    body, bad_line = JSON_CORPUS[case]
    (tmp_path / "bad.json").write_bytes(body)
    frame = _read(spark, tmp_path, "json", "id long, _corrupt_record string", mode=mode)
    if mode == "FAILFAST":
        with pytest.raises(SPARK_ERRORS, match=rf"bad\.json: malformed record at line {bad_line}"):
            frame.collect()
        return
    rows = _rows(frame, "id", "_corrupt_record")
    good = [(1, None), (3, None)]
    if mode == "DROPMALFORMED":
        assert rows == good
    else:
        assert len(rows) == 3 and [r for r in rows if r[1] is None] == good


def test_fuzzed_csv_corpus_never_loses_good_rows(spark, tmp_path):
    """Random damage to random lines: DROPMALFORMED keeps exactly the undamaged rows."""
    rng = random.Random(7)
    good: list[int] = []
    lines = []
    damage = [b"x", b"\xff", b'"', b",", b""]
    for i in range(400):
        if rng.random() < 0.2:
            hurt = rng.choice(damage)
            lines.append(b"%d%s,name-%d" % (i, hurt, i) if hurt != b"," else b"%d,name,%d" % (i, i))
            if hurt == b"":
                good.append(i)
        else:
            lines.append(b"%d,name-%d" % (i, i))
            good.append(i)
    (tmp_path / "fuzz.csv").write_bytes(b"\n".join(lines) + b"\n")
    frame = _read(spark, tmp_path, "csv", "id long, name string", mode="DROPMALFORMED")
    assert sorted(r["id"] for r in frame.collect()) == good


@pytest.mark.parametrize("fmt,make", [
    ("parquet", lambda p: p.write_bytes(pq_bytes()[: len(pq_bytes()) // 2])),
    ("orc", lambda p: p.write_bytes(b"ORC" + b"\x00" * 40)),
    ("avro", lambda p: p.write_bytes(avro_bytes()[:-20])),
    ("csv", lambda p: p.write_bytes(gzip.compress(b"1,a\n2,b\n" * 100)[:-30])),
], ids=["parquet-truncated", "orc-garbage", "avro-truncated", "gzip-truncated"])
def test_corrupt_files_fail_with_name_or_are_skipped(spark, tmp_path, fmt, make):
    suffix = ".csv.gz" if fmt == "csv" else f".{fmt}"
    make(tmp_path / f"broken{suffix}")
    schema = "id long, name string"
    with pytest.raises(SPARK_ERRORS, match=r"broken.*(corrupt or truncated|Parquet footer)"):
        _read(spark, tmp_path, fmt, schema).collect()
    _write_format(tmp_path, fmt if fmt != "csv" else "csv")
    frame = _read(spark, tmp_path, fmt, schema, ignoreCorruptFiles="true",
                  **({"header": "true"} if fmt == "csv" else {}))
    assert frame.count() >= 2


def test_zero_byte_files_are_empty(spark, tmp_path):
    for name in ("empty.csv", "empty.json", "empty.txt"):
        (tmp_path / name).write_bytes(b"")
    assert _read(spark, tmp_path, "csv", "id long", pathGlobFilter="*.csv").count() == 0
    assert _read(spark, tmp_path, "json", "id long", pathGlobFilter="*.json").count() == 0
    assert _read(spark, tmp_path, "text", pathGlobFilter="*.txt").count() == 0


def pq_bytes() -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(pa.table({"id": list(range(1000)), "name": ["n"] * 1000}), sink)
    return sink.getvalue().to_pybytes()


def avro_bytes() -> bytes:
    import io

    buffer = io.BytesIO()
    schema = {"type": "record", "name": "r", "fields": [{"name": "id", "type": "long"}, {"name": "name", "type": "string"}]}
    fastavro.writer(buffer, schema, [{"id": i, "name": "n" * 50} for i in range(500)])
    return buffer.getvalue()


def test_missing_file_is_reported_or_skipped(tmp_path):
    """A file deleted between listing (driver) and reading (executor)."""
    from sparklink.files.source.config import FileSourceConfig
    from sparklink.files.source.reader import FileSourceReader
    from sparklink.files.source.splits import Segment
    from sparklink.errors import DataError
    from sparklink.source import Split
    from pyspark.sql.types import LongType, StructField, StructType

    gone = Segment(path=str(tmp_path / "gone.csv"), size=10)
    split = Split(split_id="s", state={"segments": [gone.to_state()], "schema_file": None})
    schema = StructType([StructField("id", LongType())])
    strict = FileSourceReader(FileSourceConfig(paths=(str(tmp_path),), format="csv"), schema)
    with pytest.raises(DataError, match=r"gone\.csv: the file was listed but is gone"):
        list(strict.read(split))
    lenient = FileSourceReader(FileSourceConfig(paths=(str(tmp_path),), format="csv", ignore_missing_files=True), schema)
    assert list(lenient.read(split)) == []


def _read_csv_file(path: Path, schema, **csv_options) -> list[dict]:
    """The rows the file source reads from ``path`` (executor path, no Spark)."""
    from sparklink.files.source.config import CsvOptions, FileSourceConfig
    from sparklink.files.source.reader import FileSourceReader
    from sparklink.files.source.splits import Segment
    from sparklink.source import Split

    segment = Segment(path=str(path), size=path.stat().st_size)
    split = Split(split_id="s", state={"segments": [segment.to_state()], "schema_file": str(path)})
    config = FileSourceConfig(paths=(str(path.parent),), format="csv", csv=CsvOptions(**csv_options))
    return [row for batch in FileSourceReader(config, schema).read(split) for row in batch.to_pylist()]


# values the sink must write and the source read back unchanged: quotes, backslashes, separators
_TRICKY = ['x"y', "C:\\d", "a,b", '"quoted"', 'back\\\\slash and "quote"', "", None, "\\", 'end\\', '\\"', "plain",
           "multi\nline", "#hash"]


@pytest.mark.parametrize("header", [False, True], ids=["no-header", "header"])
def test_csv_sink_bytes_read_back_identical_at_default_options(tmp_path, header):
    """Silent corruption guard: CsvEncoder's ``\\``-escaped quotes read back as written."""
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    from sparklink.formats.csv_format import CsvEncoder

    batch = pa.record_batch({"id": pa.array(range(len(_TRICKY)), pa.int64()), "v\\\"name": pa.array(_TRICKY, pa.string())})
    encoder = CsvEncoder(header=header, schema=batch.schema)
    path = tmp_path / "sink.csv"
    path.write_bytes(encoder.header() + encoder.encode(batch))
    schema = StructType([StructField("id", LongType()), StructField('v\\"name', StringType())])
    rows = _read_csv_file(path, schema, header=header, multi_line=True)
    assert [row['v\\"name'] for row in rows] == [None if v == "" else v for v in _TRICKY]


def test_csv_reads_spark_written_backslashes_as_spark_reads_them(tmp_path):
    """Spark leaves a value whose only special character is ``\\`` bare and escapes quotes inside
    quoted values with ``\\``: both kinds in one file (and in the malformed-record fallback)."""
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    schema = StructType([StructField("id", LongType()), StructField("a", StringType()), StructField("b", StringType())])
    body = b'1,C:\\path,"x\\"y"\n2,"C:\\\\d",a\\b\n3,"say ""hi""","\\\\"\n'
    expected = [{"id": 1, "a": "C:\\path", "b": 'x"y'}, {"id": 2, "a": "C:\\d", "b": "a\\b"},
                {"id": 3, "a": 'say "hi"', "b": "\\"}]
    (tmp_path / "spark.csv").write_bytes(body)
    assert _read_csv_file(tmp_path / "spark.csv", schema) == expected
    (tmp_path / "only_unquoted.csv").write_bytes(b"1,C:\\path,x\n")
    assert _read_csv_file(tmp_path / "only_unquoted.csv", schema) == [{"id": 1, "a": "C:\\path", "b": "x"}]
    # a malformed record sends the segment to the record-by-record fallback: same values there
    (tmp_path / "bad.csv").write_bytes(body + b"4,too,many,fields\n")
    assert _read_csv_file(tmp_path / "bad.csv", schema)[:3] == expected


def test_csv_header_and_inference_follow_the_default_escape(tmp_path):
    from sparklink.formats.csv_format import CsvFormat, read_header, read_table
    from sparklink.files.source.config import CsvOptions, FileSourceConfig

    path = tmp_path / "h.csv"
    path.write_bytes(b'"i\\"d",C:\\n\n1,"x\\"y"\n')
    assert read_header(str(path), CsvOptions(header=True), "none") == ['i"d', "C:\\n"]
    config = FileSourceConfig(paths=(str(tmp_path),), format="csv", csv=CsvOptions(header=True))
    assert CsvFormat().infer_schema(str(path), config.read_config()).names == ['i"d', "C:\\n"]
    with path.open("rb") as handle:
        assert read_table(handle, "h.csv").to_pylist() == [{'i"d': 1, "C:\\n": 'x"y'}]


def test_csv_explicit_escape_keeps_its_meaning_everywhere(tmp_path):
    """An explicit ``escape`` is unchanged: it acts in unquoted values too (pyarrow's semantics)."""
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    schema = StructType([StructField("id", LongType()), StructField("a", StringType()), StructField("b", StringType())])
    (tmp_path / "e.csv").write_bytes(b'1,C:\\path,"x\\"y"\n')
    assert _read_csv_file(tmp_path / "e.csv", schema, escape="\\") == [{"id": 1, "a": "C:path", "b": 'x"y'}]


def test_csv_vectorised_unescape_matches_the_quote_by_quote_scan():
    """The vectorised classification of backslashes equals the sequential scan, on random text."""
    from sparklink.formats.csv_format import _unescape_scan, spark_unescape
    from sparklink.files.source.config import CsvOptions

    rng = random.Random(7)
    for _ in range(3000):
        data = "".join(rng.choice('ab,"\\\n') for _ in range(rng.randint(1, 24))).encode()
        expected = _unescape_scan(data, ord('"'), ord(",")) if b"\\" in data else None
        assert spark_unescape(data, CsvOptions()) == expected, data
