"""Delta Lake's own Spark connector (``delta-spark``) against ``sparklink.delta``, both ways, in one
peer JVM (Delta 4.4.0 on PySpark 4.2.0 in its own environment: no Delta build serves Spark 4.3,
see :mod:`sparklink.testing.peers`):

* Delta's reader, options at their defaults, reads a table ``sparklink.delta`` streamed in over
  several micro-batches with first task attempts failing (retried) and a compaction: every id once;
* ``sparklink.delta`` reads the tables Delta's writer made: one with Delta's default table
  features (protocol 1/2) after a DELETE (rewritten files), read exactly as Delta reads it; one
  with deletion vectors on (``delta.enableDeletionVectors``) after a DELETE, so that a deletion
  vector exists: read exactly as Delta reads it (the deleted rows left out), in a batch read and
  in a stream's initial snapshot; one with the change data feed on
  (``delta.enableChangeDataFeed``) after a MERGE, an UPDATE and a DELETE: ``readChangeFeed``
  reads the rows Delta's ``table_changes`` returns, in a stream and in a ``spark.read`` of a
  range of versions."""

from __future__ import annotations

import json

import pytest

from sparklink.testing.peers import delta_conf, run_peer
from tests.delta.test_delta_source_changes import read_all

FILES, ROWS_PER_FILE = 4, 10


@pytest.fixture(scope="module")
def tables(spark, tmp_path_factory, armed_faults_file):
    """The sparklink table, the peer's two tables and what the peer read (one peer JVM)."""
    from sparklink.testing.faults import arm_file

    root = tmp_path_factory.mktemp("delta-peer")
    src, ours, ck = root / "in", root / "sparklink", root / "ck"
    src.mkdir()
    for index in range(FILES):
        ids = range(index * ROWS_PER_FILE, (index + 1) * ROWS_PER_FILE)
        (src / f"f-{index}.json").write_text("".join(json.dumps({"id": i, "grp": i % 3}) + "\n" for i in ids))
    frame = spark.readStream.format("json").schema("id long, grp int").option("maxFilesPerTrigger", 1).load(str(src))
    writer = (frame.writeStream.format("sparklink.delta").option("path", str(ours)).option("partitionColumns", "grp")
              .option("compaction.everyNCheckpoints", "2").option("checkpointLocation", str(ck))
              .trigger(availableNow=True))
    with arm_file(armed_faults_file, "writer.after_write:raise@1", attempt=0):
        writer.start().awaitTermination()
    plain, with_dv, cdf = root / "delta-spark-plain", root / "delta-spark-dv", root / "delta-spark-cdf"
    steps = [{"op": "ids", "format": "delta", "path": str(ours)}]
    for path, properties in ((plain, ""), (with_dv, "TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')")):
        steps += [
            {"op": "sql", "query": f"CREATE TABLE delta.`{path}` (id BIGINT, label STRING) USING delta {properties}"},
            {"op": "sql", "query": f"INSERT INTO delta.`{path}` SELECT id, CAST(id AS STRING) FROM range(0, 60, 1, 2)"},
            {"op": "sql", "query": f"DELETE FROM delta.`{path}` WHERE id % 5 = 0"},
            {"op": "ids", "format": "delta", "path": str(path)},
        ]
    steps += [
        {"op": "sql", "query": f"CREATE TABLE delta.`{cdf}` (id BIGINT, label STRING) USING delta "
                               "TBLPROPERTIES ('delta.enableChangeDataFeed' = 'true')"},
        {"op": "sql", "query": f"INSERT INTO delta.`{cdf}` SELECT id, CAST(id AS STRING) FROM range(0, 10, 1, 2)"},
        {"op": "sql", "query": f"MERGE INTO delta.`{cdf}` t USING (SELECT id, 'm' AS label FROM range(8, 12)) s "
                               "ON t.id = s.id WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"},
        {"op": "sql", "query": f"UPDATE delta.`{cdf}` SET label = 'u' WHERE id = 3"},
        {"op": "sql", "query": f"DELETE FROM delta.`{cdf}` WHERE id < 2"},
        {"op": "sql", "query": f"SELECT id, label, _change_type, _commit_version FROM table_changes_by_path("
                               f"'{cdf}', 1)"},
        {"op": "sql", "query": f"SELECT id, label, _change_type, _commit_version FROM table_changes_by_path("
                               f"'{cdf}', 2, 3)"},
    ]
    upserted, upserted_state = root / "sparklink-upserted", upserted_table(root / "sparklink-upserted", root / "ck-u")
    steps.append({"op": "sql", "query": f"SELECT id, v, seq FROM delta.`{upserted}`"})
    run = run_peer("spark-delta", delta_conf(), steps)
    return {"ours": ours, "plain": plain, "dv": with_dv, "cdf": cdf, "read_ours": run.values[0],
            "read_plain": run.values[4], "read_dv": run.values[8], "changes_cdf": run.values[14],
            "changes_cdf_2_3": run.values[15], "upserted": upserted_state, "read_upserted": run.values[16]}


def upserted_table(path, checkpoint) -> dict:
    """A ``sparklink.delta`` table written with ``writeMode=upsert`` (a generated changelog of 4
    micro-batches: inserts, updates, deletes, keys repeated in a batch, late sequence values),
    Spark-free as the conformance suite drives the sink; the state a dict replay of it expects."""
    from sparklink.delta.sink import DeltaSink
    from tests.delta.changelog import generate, replay
    from tests.delta.test_delta_upsert import SCHEMA, UPSERT, micro_batch

    options = {"path": str(path), "checkpointLocation": str(checkpoint), **UPSERT}
    state: dict = {}
    for batch_id, rows in enumerate(generate(batches=4, changes=40, keys=25)):
        micro_batch(DeltaSink(options, SCHEMA), batch_id, [rows[0::2], rows[1::2]])
        replay(state, rows)
    return state


def test_delta_spark_reads_every_id_of_a_sparklink_table_once(tables):
    log = [[json.loads(line) for line in entry.read_text().splitlines()]
           for entry in sorted((tables["ours"] / "_delta_log").glob("*.json"))]
    rewrites = [actions for actions in log if any(a.get("add", {}).get("dataChange") is False for a in actions)
                and any("remove" in a for a in actions)]
    assert rewrites, "no compaction (dataChange=false rewrite) in the sparklink table's log"
    assert len(log) >= FILES + 1, len(log)
    assert tables["read_ours"] == list(range(FILES * ROWS_PER_FILE))


def test_sparklink_reads_a_delta_spark_table_with_default_features_after_a_delete(spark, tables):
    expected = [i for i in range(60) if i % 5]
    assert tables["read_plain"] == expected  # Delta's own reader, for reference
    frame = spark.read.format("sparklink.delta").option("path", str(tables["plain"])).load()
    assert sorted(r.id for r in frame.collect()) == expected


def test_sparklink_reads_a_delta_spark_table_with_deletion_vectors(spark, tables):
    log = [json.loads(line) for entry in sorted((tables["dv"] / "_delta_log").glob("*.json"))
           for line in entry.read_text().splitlines()]
    assert any((a.get("add") or {}).get("deletionVector") for a in log), "the DELETE wrote no deletion vector"
    expected = [i for i in range(60) if i % 5]
    assert tables["read_dv"] == expected  # Delta's own reader, for reference
    frame = spark.read.format("sparklink.delta").option("path", str(tables["dv"])).load()
    assert sorted(r.id for r in frame.collect()) == expected
    assert sorted(r["id"] for r in read_all({"path": str(tables["dv"])})) == expected  # a stream's snapshot


def test_sparklink_reads_the_change_feed_delta_spark_wrote(tables):
    theirs = sorted(tuple(row) for row in tables["changes_cdf"])
    assert {row[2] for row in theirs} == {"insert", "update_preimage", "update_postimage", "delete"}
    ours = read_all({"path": str(tables["cdf"]), "readChangeFeed": "true", "startingVersion": "1"})
    assert sorted((r["id"], r["label"], r["_change_type"], r["_commit_version"]) for r in ours) == theirs


def test_a_spark_read_of_changes_equals_delta_spark_table_changes(spark, tables):
    """``spark.read`` with ``readChangeFeed`` of versions 2 (the MERGE) to 3 (the UPDATE): the
    rows Delta's ``table_changes_by_path(path, 2, 3)`` returns."""
    theirs = sorted(tuple(row) for row in tables["changes_cdf_2_3"])
    assert {row[3] for row in theirs} == {2, 3}
    frame = (spark.read.format("sparklink.delta").option("path", str(tables["cdf"])).option("readChangeFeed", "true")
             .option("startingVersion", 2).option("endingVersion", 3).load())
    assert sorted((r.id, r.label, r._change_type, r._commit_version) for r in frame.collect()) == theirs


def test_delta_spark_reads_a_sparklink_upserted_table_as_the_changelog_replays(tables):
    """Issue 40's proof by a reader nobody here wrote: the table MERGEd by sparklink's upsert
    mode (removes, adds, the opColumn left out), read by Delta's own reader, equals the dict."""
    theirs = {row[0]: (row[1], row[2]) for row in tables["read_upserted"]}
    assert len(theirs) == len(tables["read_upserted"]), "a key twice in Delta's read"
    assert theirs == tables["upserted"]
