"""Damaged file sink metadata (issue 15): exact or refused, never silent loss.

Most cases drive the sink without Spark, the way Spark's adapter does: for every micro-batch
the sink is built from its options and its stream writer runs the per-micro-batch check
("planning"), tasks write through the pickled sink, then the sink is built again and the
writer's ``commit(messages, batchId)`` runs ("commit worker"). A restart is a new run id. One
test runs the issue's own reproduction on local Spark (the shared session).
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import uuid
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql.types import LongType, StringType, StructField, StructType

from sparklink.files.sink.inspection import find_violations
from sparklink.errors import MetadataError
from sparklink.files.sink.connector import FileSinkConnector
from sparklink.sink.writer import WriterContext
from sparklink.spark.sink_adapter import SinkCommitMessage, SinkStreamWriter
from tests.files.sink_readers import hidden_files, read_ids

SCHEMA = StructType([StructField("id", LongType()), StructField("kind", StringType())])
ROWS_PER_BATCH = 10
QUERY_ID = "query-under-test"
CONFIGS = {
    # a row format whose files are carried across batches (one per bucket and partition)
    "default-rolling": ({"format": "json", "bucketAssigner": "basepath", "rollingPolicy": "default",
                         "rolloverInterval": "1h"}, {"rolloverInterval": "0s"}, "json"),
    "checkpoint-rolling": ({"format": "parquet", "bucketAssigner": "basepath"}, {}, "parquet"),
    "compaction": ({"format": "parquet", "bucketAssigner": "basepath", "compaction.everyNCheckpoints": "3"},
                   {"compaction.everyNCheckpoints": "1"}, "parquet"),
}


class SimulatedQuery:
    """One streaming query over ``tmp_path / 'out'``, run without Spark (see the module docstring)."""

    def __init__(self, tmp_path: Path, options: dict[str, str]):
        self.out = tmp_path / "out"
        self.options = dict(options, path=str(self.out), checkpointLocation=str(tmp_path / "ck"))
        self.run_id = uuid.uuid4().hex
        self.next_batch = 0

    def restart(self, **changed: str) -> None:
        self.options.update(changed)
        self.run_id = uuid.uuid4().hex

    def _writer(self) -> SinkStreamWriter:
        return SinkStreamWriter(FileSinkConnector(self.options, SCHEMA), query_id=QUERY_ID)

    def run_batch(self) -> None:
        batch = self.next_batch
        planned = pickle.loads(pickle.dumps(self._writer().sink))  # what the tasks receive
        ids = list(range(batch * ROWS_PER_BATCH, (batch + 1) * ROWS_PER_BATCH))
        messages = []
        for partition in (0, 1):
            context = WriterContext(partition_id=partition, attempt_number=0, task_attempt_id=batch * 10 + partition,
                                    job_id=f"job-{batch}", batch_id=batch, query_id=QUERY_ID, run_id=self.run_id)
            writer = planned.create_writer(context)
            part_ids = ids[partition::2]
            writer.write_batch(pa.RecordBatch.from_pydict({"id": pa.array(part_ids, pa.int64()),
                                                           "kind": pa.array(["k"] * len(part_ids))}))
            writer.flush()
            messages.append(SinkCommitMessage(partition_id=partition, attempt_number=0, query_id=QUERY_ID,
                                              committables=writer.prepare_commit(), run_id=self.run_id))
            writer.close()
        self._writer().commit(messages, batch)
        self.next_batch += 1

    def run(self, batches: int) -> None:
        for _ in range(batches):
            self.run_batch()


@pytest.fixture
def no_fsync(monkeypatch):
    """These tests are about what the metadata says, not about durability: fsync (most of
    their time on a busy disk) is skipped."""
    monkeypatch.setattr(os, "fsync", lambda fd: None)


def _meta(out: Path) -> Path:
    return out / "_sparklink"


# --------------------------------------------------------------------------- the fuzz


DAMAGED_FILES = ["commits/2.json", "commits/1.json", "state/2.json", "state/1.json", "owner.json"]
WAYS = ["delete", "truncate", "empty", "garbage", "older-copy"]


def _damage(meta: Path, relative: str, way: str, snapshot: Path) -> None:
    """Damage one metadata file. 'older-copy' puts back the file as it was after batch 1 if it
    existed then, else the same kind of file of the batch before (a copy from an older backup)."""
    target = meta / relative
    if way == "delete":
        target.unlink()
    elif way == "truncate":
        target.write_bytes(target.read_bytes()[: len(target.read_bytes()) // 2])
    elif way == "empty":
        target.write_bytes(b"")
    elif way == "garbage":
        target.write_bytes(bytes(range(256)) * 3)
    else:
        older = snapshot / relative
        if not older.exists():
            kind, name = relative.split("/")
            older = snapshot / kind / f"{int(name.split('.')[0]) - 1}.json"
        shutil.copyfile(older, target)


@pytest.mark.parametrize("way", WAYS)
@pytest.mark.parametrize("damaged", DAMAGED_FILES)
@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_damaged_metadata_is_rebuilt_exactly_or_refused(no_fsync, tmp_path, config, damaged, way):
    """Three micro-batches, the query stopped, one metadata file damaged, then a restart runs
    three more (the last options make everything visible): either every id is visible exactly
    once and nothing hidden is left, or the restart is refused with an error naming the file;
    a refusal changes nothing that was visible."""
    options, finishing, fmt = CONFIGS[config]
    query = SimulatedQuery(tmp_path, options)
    query.run(2)
    shutil.copytree(_meta(query.out), tmp_path / "snapshot")
    query.run(1)
    visible_before = read_ids(query.out, fmt)
    _damage(_meta(query.out), damaged, way, tmp_path / "snapshot")
    query.restart()
    try:
        query.run(2)
        query.restart(**finishing)
        query.run(1)
    except MetadataError as refused:
        assert damaged.split("/")[-1] in str(refused) and str(_meta(query.out)) in str(refused), str(refused)
        assert read_ids(query.out, fmt) == visible_before
        violations, _ = find_violations(query.out)  # verify reports the same, without a traceback
        assert any(damaged in v for v in violations), violations
        return
    assert read_ids(query.out, fmt) == list(range(6 * ROWS_PER_BATCH))
    assert hidden_files(query.out) == []
    assert find_violations(query.out)[0] == []


# --------------------------------------------------------------------------- one test per defect


def test_deleted_last_state_of_carried_files_is_rebuilt_not_lost(tmp_path, caplog):
    """Issue 15, defect 1 without Spark: state/2.json of a row format carried across batches."""
    query = SimulatedQuery(tmp_path, CONFIGS["default-rolling"][0])
    query.run(3)
    (_meta(query.out) / "state" / "2.json").unlink()
    query.restart()
    with caplog.at_level("WARNING", logger="sparklink.files.sink.connector"):
        query.run(1)
    assert "state/2.json: file sink state is missing; recovery rebuilds it from commits/2.json" in caplog.text
    query.restart(rolloverInterval="0s")
    query.run(1)
    assert read_ids(query.out, "json") == list(range(50))


def test_compaction_with_a_deleted_state_continues(tmp_path):
    """Issue 15, defect 3: compaction every 3 checkpoints, state/2.json (the batch that
    compacted) removed: the restart used to fail for good on a compacted input."""
    query = SimulatedQuery(tmp_path, CONFIGS["compaction"][0])
    query.run(3)
    (_meta(query.out) / "state" / "2.json").unlink()
    query.restart()
    query.run(3)
    assert read_ids(query.out, "parquet") == list(range(60))
    assert hidden_files(query.out) == []


@pytest.mark.parametrize("relative", ["commits/2.json", "state/2.json", "owner.json"])
@pytest.mark.parametrize("content", [bytes(range(256)), b"", b'{"queryId": "query-under'],
                         ids=["garbage", "empty", "half"])
def test_damaged_file_errors_name_the_file_and_verify_reports_it(tmp_path, relative, content):
    """Issue 15, defect 6: errors name the file; verify reports it (no traceback); a
    half-written owner claim is a violation."""
    query = SimulatedQuery(tmp_path, CONFIGS["checkpoint-rolling"][0])
    query.run(3)
    path = _meta(query.out) / relative
    path.write_bytes(content)
    violations, _ = find_violations(query.out)
    assert any(relative in v for v in violations), violations
    if relative == "owner.json":
        query.restart()
        with pytest.raises(MetadataError, match=r"owner\.json .*delete .*owner\.json"):
            query.run(1)


def test_verify_after_deleted_state_reports_the_state_not_a_stray_file(tmp_path):
    """Issue 15, defect 7: an exact Parquet output whose state/2.json was deleted: the files of
    batch 2 are listed by commits/2.json, so none is 'not in the commit log'."""
    query = SimulatedQuery(tmp_path, CONFIGS["checkpoint-rolling"][0])
    query.run(3)
    (_meta(query.out) / "state" / "2.json").unlink()
    violations, counts = find_violations(query.out, key="id")
    assert counts["rows"] == 30
    assert not [v for v in violations if "not in the commit log" in v], violations
    assert violations == [f"metadata: {_meta(query.out) / 'state' / '2.json'}: file sink state is missing; "
                          "recovery rebuilds it from commits/2.json and the state before it"]


def test_state_and_entry_of_the_last_batch_both_gone_refuses(tmp_path):
    query = SimulatedQuery(tmp_path, CONFIGS["default-rolling"][0])
    query.run(3)
    (_meta(query.out) / "commits" / "2.json").write_bytes(b"\x00")
    (_meta(query.out) / "state" / "2.json").unlink()
    query.restart()
    with pytest.raises(MetadataError, match=r"2\.json.*what micro-batch 2 committed cannot be known"):
        query.run(1)


# --------------------------------------------------------------------------- on local Spark


def _stream_files(spark, src: Path, out: Path, ck: Path, rollover: str):
    frame = (spark.readStream.format("sparklink.files").option("path", str(src)).option("format", "json")
             .schema("id long").option("maxFilesPerTrigger", 1).load())
    query = (frame.writeStream.format("sparklink.files").option("path", str(out)).option("checkpointLocation", str(ck))
             .option("format", "json").option("bucketAssigner", "basepath").option("rollingPolicy", "default")
             .option("rolloverInterval", rollover).trigger(availableNow=True).start())
    query.awaitTermination()
    assert query.exception() is None, query.exception()
    return query


def test_issue_reproduction_deleted_state_loses_nothing(spark, tmp_path):
    """Issue 15, defect 1 as reported: three input files of 10 ids (batches 0-2), state/2.json
    deleted with the query stopped, then a restart with a fourth file and rolloverInterval
    1ms: all 40 ids (were 30). Every commit log entry names the run that wrote it (the write
    tasks' run id, Spark's StreamingQuery.runId)."""
    src, out, ck = tmp_path / "in", tmp_path / "out", tmp_path / "ck"
    src.mkdir()

    def add_file(index: int) -> None:
        (src / f"f{index}.json").write_text("".join(json.dumps({"id": index * 10 + i}) + "\n" for i in range(10)))

    for index in range(3):
        add_file(index)
    first = _stream_files(spark, src, out, ck, "1h")
    (out / "_sparklink" / "state" / "2.json").unlink()
    add_file(3)
    third = _stream_files(spark, src, out, ck, "1ms")
    assert read_ids(out, "json") == list(range(40))
    assert find_violations(out, key="id")[0] == []
    runs = {json.loads(p.read_text())["batchId"]: json.loads(p.read_text())["extra"].get("runId")
            for p in (out / "_sparklink" / "commits").glob("*.json")}
    assert runs == {0: str(first.runId), 1: str(first.runId), 2: str(first.runId), 3: str(third.runId)}, runs
