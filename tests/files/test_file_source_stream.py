"""Continuous reading: discovery per trigger, admission limits, AvailableNow, stability, the
builder, and bounded state with 100,000 small files."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from sparklink.errors import ConfigError
from sparklink.files.source.config import FileSourceConfig
from sparklink.files.source.enumerator import FileSplitEnumerator
from sparklink.files.source.position import START, FilePosition
from sparklink.source import READ_ALL, ReadLimit
from tests.files.jobs_source import committed_ids, stream_text_to_directory, write_csv_file


def _config(src: Path, **kwargs) -> FileSourceConfig:
    kwargs.setdefault("min_file_age", 0.0)
    return FileSourceConfig(paths=(str(src),), format="csv", **kwargs)


def _settle() -> None:
    time.sleep(0.15)  # arrival keys must fall behind the enumerator's 100 ms clock margin


# ------------------------------------------------------------------------------ enumerator (driver, no Spark)


@pytest.mark.parametrize("limit,batches", [
    (ReadLimit(max_files=2), [2, 2, 1]),
    (ReadLimit(max_bytes=25), [2, 2, 1]),
    (READ_ALL, [5]),
], ids=["max-files", "max-bytes", "all"])
def test_admission_limits_cut_the_reading_order(tmp_path, limit, batches):
    (tmp_path / "in").mkdir()
    for i in range(5):
        write_csv_file(tmp_path / "in", f"f{i}.csv", range(i, i + 1))
    _settle()
    enumerator = FileSplitEnumerator(_config(tmp_path / "in"), streaming=True)
    start, seen = enumerator.initial_offset(), []
    while True:
        end = enumerator.latest_offset(start, limit)
        if end == start:
            break
        files = [s["path"] for split in enumerator.plan_splits(start, end) for s in split.state["segments"]]
        seen.append(len(files))
        start = end
    assert seen == batches


def test_young_files_wait_for_min_file_age(tmp_path):
    (tmp_path / "in").mkdir()
    write_csv_file(tmp_path / "in", "a.csv", range(1))
    enumerator = FileSplitEnumerator(_config(tmp_path / "in", min_file_age=30.0), streaming=True)
    start = enumerator.initial_offset()
    assert enumerator.latest_offset(start, READ_ALL) == start  # still inside minFileAge
    older = FileSplitEnumerator(_config(tmp_path / "in", min_file_age=0.0), streaming=True)
    _settle()
    assert older.latest_offset(start, READ_ALL) != start


def test_a_file_that_appears_later_sorts_after_the_position(tmp_path):
    """The O(1) offset is safe: a file moved in after a batch arrives with a later key, even
    when its modification time is older (os.replace keeps mtime, sets ctime)."""
    src = tmp_path / "in"
    src.mkdir()
    write_csv_file(src, "new.csv", range(1))
    old = tmp_path / "old.csv"
    old.write_text("9,x\n")
    os.utime(old, (1_000_000, 1_000_000))  # modified in 1970
    _settle()
    enumerator = FileSplitEnumerator(_config(src), streaming=True)
    first = enumerator.latest_offset(enumerator.initial_offset(), READ_ALL)
    os.replace(old, src / "old.csv")
    _settle()
    second = enumerator.latest_offset(first, READ_ALL)
    splits = enumerator.plan_splits(first, second)
    assert [s["path"] for split in splits for s in split.state["segments"]] == [str(src / "old.csv")]


def test_replayed_batch_plans_the_same_splits_in_a_new_process(tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    for i in range(3):
        write_csv_file(src, f"f{i}.csv", range(i, i + 1))
    _settle()
    first = FileSplitEnumerator(_config(src), streaming=True)
    start = first.initial_offset()
    end = first.latest_offset(start, ReadLimit(max_files=2))
    planned = [s.to_json() for s in first.plan_splits(start, end)]
    write_csv_file(src, "later.csv", range(9, 10))  # arrives after the batch was planned
    replay = FileSplitEnumerator(_config(src), streaming=True)
    assert [s.to_json() for s in replay.plan_splits(start, end)] == planned


@pytest.mark.parametrize("position", [START, FilePosition(ts=1716200000123456789, path="/d/k=1/é,x.csv")],
                         ids=["start", "file"])
def test_position_round_trips_through_json(position):
    text = json.dumps(position.to_offset())
    assert FilePosition.from_offset(text) == position
    assert FilePosition.from_offset(json.loads(text)) == position


def test_split_state_round_trips_through_json(tmp_path):
    from sparklink.files.source.splits import Segment
    from sparklink.source import Split

    segment = Segment(path="/d/day=1/a.csv", size=10, partition=(("day", "1"),), start=0, end=5, unit="bytes")
    split = Split(split_id="1-0", state={"segments": [segment.to_state()], "schema_file": "/d/a.csv"})
    again = Split.from_json(split.to_json())
    assert again == split and Segment.from_state(again.state["segments"][0]) == segment


@pytest.mark.parametrize("options,match", [
    ({"format": "csv"}, "option 'path': is required"),
    ({"path": "/x", "format": "xml"}, "option 'format': unknown value 'xml'"),
    ({"path": "/x", "format": "csv", "mode": "LENIENT"}, "option 'mode': unknown value"),
    ({"path": "/x", "format": "csv", "maxFilesPerTrigger": "0"}, "option 'maxFilesPerTrigger': must be at least 1"),
    ({"path": "/x", "format": "csv", "maxBytesPerTrigger": "lots"}, "option 'maxBytesPerTrigger': 'lots' is not a size"),
    ({"path": "/x", "format": "csv", "minFileAge": "soon"}, "option 'minFileAge'"),
    ({"path": "/x", "format": "csv", "delimiter": ";;"}, "option 'delimiter': must be a single character"),
    ({"path": "/x", "format": "parquet", "compression": "gzip"}, "option 'compression': applies to text formats"),
    ({"path": "/x", "format": "csv", "fileEnumerator": "nomodule"}, "option 'fileEnumerator'"),
    ({"path": "/x", "format": "csv", "colour": "red"}, "option 'colour': unknown option"),
], ids=["no-path", "format", "mode", "max-files", "max-bytes", "min-age", "delimiter", "compression", "enumerator",
        "unknown"])
def test_every_option_is_validated_at_start(options, match):
    from sparklink.files.source.connector import FileSourceConnector

    with pytest.raises(ConfigError, match=match):
        FileSourceConnector(options)


# ------------------------------------------------------------------------------ Spark streams


def test_stream_discovers_new_files_per_trigger_with_max_files(spark, tmp_path):
    src, out, ck = tmp_path / "in", tmp_path / "out", tmp_path / "ck"
    src.mkdir()
    for i in range(5):
        write_csv_file(src, f"f{i}.csv", range(i * 10, i * 10 + 10))

    def run():
        frame = (spark.readStream.format("sparklink.files").option("path", str(src)).option("format", "csv")
                 .option("maxFilesPerTrigger", 2).option("minFileAge", "0").schema("id long, payload string").load())
        query = (frame.writeStream.format("sparklink.directory").option("path", str(out))
                 .option("checkpointLocation", str(ck)).trigger(availableNow=True).start())
        query.awaitTermination()
        return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]

    assert run() == [20, 20, 10]
    assert sorted(committed_ids(out)) == list(range(50))
    for i in range(5, 7):  # files that arrive later are found by the next run, and only they
        write_csv_file(src, f"f{i}.csv", range(i * 10, i * 10 + 10))
    assert run() == [20]
    assert sorted(committed_ids(out)) == list(range(70))


def test_builder_compiles_to_options_and_reads(spark, tmp_path):
    from sparklink.files import FileSource
    from sparklink.files.source.builder import CsvReaderFormat, ParquetFormat
    from sparklink.files.source.listing import DirectoryFileEnumerator

    src = tmp_path / "in"
    src.mkdir()
    write_csv_file(src, "a.csv", range(3))
    bounded = FileSource.for_record_stream_format(CsvReaderFormat(), str(src)).build()
    assert bounded.options["format"] == "csv" and bounded.options["bounded"] == "true"
    assert sorted(r["id"] for r in bounded.read(spark, "id long, payload string").collect()) == [0, 1, 2]
    with pytest.raises(ConfigError, match="monitor_continuously"):
        bounded.read_stream(spark)
    continuous = (FileSource.for_record_stream_format(CsvReaderFormat(), str(src)).monitor_continuously("1s")
                  .set_file_enumerator(DirectoryFileEnumerator).set_option("minFileAge", "0").build())
    assert continuous.options["monitorInterval"] == "1.0s"
    assert continuous.options["fileEnumerator"] == "sparklink.files.source.listing:DirectoryFileEnumerator"
    query = (continuous.read_stream(spark, "id long, payload string").writeStream.format("memory")
             .queryName("fs_builder").trigger(availableNow=True).start())
    query.awaitTermination()
    assert spark.sql("select count(*) c from fs_builder").collect()[0]["c"] == 3
    with pytest.raises(ConfigError, match="not a bulk format"):
        FileSource.for_bulk_file_format("csv", str(src))
    assert FileSource.for_bulk_file_format(ParquetFormat, str(src), str(tmp_path)).build().options["paths"]


@pytest.mark.slow
def test_state_stays_bounded_with_40k_small_files(spark, tmp_path):
    """40,000 files through a continuous query, 10,000 a micro-batch: the stored state (Spark's
    offset log; the source keeps no side log) is the same small size whatever the number of files."""
    src = tmp_path / "in"
    files = 40_000
    for d in range(20):
        directory = src / f"d{d:02d}"
        directory.mkdir(parents=True)
        for i in range(d * files // 20, (d + 1) * files // 20):  # raw syscalls: 40,000 files in a second
            fd = os.open(directory / f"f{i:06d}.txt", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            os.write(fd, b"%d\n" % i)
            os.close(fd)
    out, ck = tmp_path / "out", tmp_path / "ck"
    stream_text_to_directory(spark, src=str(src), out=str(out), checkpoint=str(ck), max_files=10_000)
    values = sorted(int(v) for v in _committed_values(out))
    assert values == list(range(files))
    offsets = sorted((p for p in (ck / "offsets").iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
    assert len(offsets) >= 4
    sizes = [len(p.read_text().splitlines()[-1]) for p in offsets]  # the source's offset is the last line
    assert max(sizes) < 200, sizes
    side_state = [p for p in ck.rglob("*") if "sources" in p.parts and p.is_file()]
    assert sum(p.stat().st_size for p in side_state) < 1024


def _committed_values(out: Path) -> list[str]:
    import pyarrow.parquet as pq

    values: list[str] = []
    for part in sorted(out.glob("part-*.parquet")):
        values.extend(pq.read_table(part, columns=["value"]).column("value").to_pylist())
    return values


def test_committed_ids_helper_sees_only_visible_files(tmp_path):
    assert committed_ids(tmp_path) == []
