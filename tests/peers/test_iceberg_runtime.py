"""The Iceberg Spark runtime against ``sparklink.iceberg``, both ways, in one peer JVM (Iceberg
1.12.0 on PySpark 4.1.4 in its own environment: no Iceberg build serves Spark 4.3, see
:mod:`sparklink.testing.peers`). Both sides share one catalog: pyiceberg's SQL catalog file
(SQLite) is the database of Iceberg's JdbcCatalog, under the same catalog name, over the same
warehouse.

* Iceberg's reader, options at their defaults, reads a table ``sparklink.iceberg`` streamed in over
  several micro-batches with first task attempts failing (retried): every id once;
* ``sparklink.iceberg`` reads a table Iceberg's writer made with its defaults (an append, then a
  DELETE: files rewritten, copy-on-write) exactly as Iceberg reads it; and refuses, naming the
  delete files, a table where the DELETE wrote position deletes (``write.delete.mode`` =
  ``merge-on-read``);
* a table with equality delete files (committed through pyiceberg's manifest writer, as Flink's
  upsert writer makes them: one and two columns, null keys, an upsert's new rows in the delete's
  snapshot, rows appended after): ``sparklink.iceberg``'s ``spark.read`` sees what Iceberg's
  reader sees."""

from __future__ import annotations

import json

import pytest

from sparklink.testing.peers import iceberg_conf, run_peer

CATALOG = "peer"
FILES, ROWS_PER_FILE = 4, 10


@pytest.fixture(scope="module")
def tables(spark, tmp_path_factory, armed_faults_file):
    from sparklink.testing.faults import arm_file

    root = tmp_path_factory.mktemp("iceberg-peer")
    src, ck = root / "in", root / "ck"
    src.mkdir()
    (root / "warehouse").mkdir()
    catalog = {"catalog.name": CATALOG, "catalog.type": "sql", "catalog.uri": f"sqlite:///{root}/catalog.db",
               "catalog.warehouse": f"file://{root}/warehouse"}
    for index in range(FILES):
        ids = range(index * ROWS_PER_FILE, (index + 1) * ROWS_PER_FILE)
        (src / f"f-{index}.json").write_text("".join(json.dumps({"id": i, "label": f"l-{i}"}) + "\n" for i in ids))
    frame = spark.readStream.format("json").schema("id long, label string").option("maxFilesPerTrigger", 1).load(str(src))
    writer = (frame.writeStream.format("sparklink.iceberg").options(**catalog).option("table", "db.ours")
              .option("checkpointLocation", str(ck)).trigger(availableNow=True))
    with arm_file(armed_faults_file, "writer.after_write:raise@1", attempt=0):
        writer.start().awaitTermination()
    steps = [{"op": "ids", "table": f"{CATALOG}.db.ours"}]
    for name, properties in (("theirs", ""), ("theirs_mor", ", 'write.delete.mode' = 'merge-on-read'")):
        table = f"{CATALOG}.db.{name}"
        steps += [
            {"op": "sql", "query": f"CREATE TABLE {table} (id BIGINT, label STRING) USING iceberg "
                                   f"TBLPROPERTIES ('format-version' = '2'{properties})"},
            {"op": "sql", "query": f"INSERT INTO {table} SELECT id, CAST(id AS STRING) FROM range(0, 60, 1, 2)"},
            {"op": "sql", "query": f"DELETE FROM {table} WHERE id % 5 = 0"},
            {"op": "ids", "table": table},
        ]
    make_equality_delete_table(catalog)
    steps.append({"op": "sql", "query": f"SELECT id, label FROM {CATALOG}.db.eq"})
    upserted = upserted_table(catalog, root / "ck-upserted")
    steps.append({"op": "sql", "query": f"SELECT id, v, seq FROM {CATALOG}.db.upserted"})
    conf = iceberg_conf(CATALOG, root / "catalog.db", f"file://{root}/warehouse")
    run = run_peer("spark-iceberg", conf, steps)
    return {"catalog": catalog, "read_ours": run.values[0], "read_theirs": run.values[4], "read_mor": run.values[8],
            "read_eq": run.values[9], "upserted": upserted, "read_upserted": run.values[10]}


def upserted_table(catalog: dict, checkpoint) -> dict:
    """``db.upserted``, written by ``sparklink.iceberg`` with ``writeMode=upsert`` (4 micro-batches
    of a generated changelog: inserts, updates, deletes, keys repeated across tasks, late sequence
    values), Spark-free as the conformance suite drives the sink; the state a dict replay expects."""
    import random

    from tests.iceberg.test_iceberg_upsert import UPSERT, micro_batch, replay

    options = dict(catalog, table="db.upserted", **UPSERT)
    rng, state, seq = random.Random(11), {}, 0
    for batch_id in range(4):
        rows, seen = [], set()
        for _ in range(40):
            seq += 1
            key = rng.randrange(25)
            late = seq - rng.randrange(20) if rng.random() < 0.2 else seq
            if (key, late) not in seen:  # one sequence value per key per batch: ties are refused
                seen.add((key, late))
                rows.append((key, f"b{batch_id}-{seq}", late, "d" if rng.random() < 0.25 else "u"))
        micro_batch(options, checkpoint, batch_id, [rows[0::2], rows[1::2]])
        replay(state, rows)
    return state


def make_equality_delete_table(catalog: dict) -> None:
    import pyarrow as pa

    from tests.iceberg.source_tables import SCHEMA, add_equality_deletes, catalog_of

    def labelled(pairs):
        return pa.table({"id": pa.array([i for i, _ in pairs], pa.int64()), "label": [x for _, x in pairs]},
                        schema=SCHEMA)

    options = {**catalog, "table": "db.eq"}
    catalog_of(options).create_table("db.eq", schema=SCHEMA)

    def table():
        return catalog_of(options).load_table("db.eq")

    table().append(labelled([(i, None if i in (7, 8) else f"l-{i}") for i in range(10)]))
    add_equality_deletes(table(), {"id": [1, 4]}, rows=labelled([(4, "new-4")]))
    add_equality_deletes(table(), {"id": [2, 7, 8], "label": ["l-2", None, "l-8"]})
    add_equality_deletes(table(), {"label": [None]})
    table().append(labelled([(1, "back-1"), (20, None)]))


def test_iceberg_spark_runtime_reads_every_id_of_a_sparklink_table_once(tables):
    assert tables["read_ours"] == list(range(FILES * ROWS_PER_FILE))


def test_sparklink_reads_a_table_the_iceberg_runtime_wrote_and_deleted_from(spark, tables):
    expected = [i for i in range(60) if i % 5]
    assert tables["read_theirs"] == expected  # Iceberg's own reader, for reference
    frame = spark.read.format("sparklink.iceberg").options(**tables["catalog"]).option("table", "db.theirs").load()
    assert sorted(r.id for r in frame.collect()) == expected


def test_sparklink_applies_the_position_deletes_the_iceberg_runtime_wrote(spark, tables):
    """A merge-on-read DELETE by Iceberg's Spark runtime writes position delete files: sparklink's
    batch read applies them, and sees what Iceberg's own reader sees."""
    expected = [i for i in range(60) if i % 5]
    assert tables["read_mor"] == expected  # Iceberg's own reader, for reference
    frame = spark.read.format("sparklink.iceberg").options(**tables["catalog"]).option("table", "db.theirs_mor").load()
    assert sorted(r.id for r in frame.collect()) == expected


def test_sparklink_applies_equality_deletes_as_the_iceberg_runtime_does(spark, tables):
    """Iceberg's own reader (options at their defaults) is the reference; the rows worked out by
    hand from the spec's rule agree with it."""
    def key(row):
        return (row[0], row[1] is None, row[1] or "")

    theirs = sorted((tuple(row) for row in tables["read_eq"]), key=key)
    assert theirs == sorted([(0, "l-0"), (3, "l-3"), (4, "new-4"), (5, "l-5"), (6, "l-6"), (9, "l-9"),
                             (1, "back-1"), (20, None)], key=key)
    frame = spark.read.format("sparklink.iceberg").options(**tables["catalog"]).option("table", "db.eq").load()
    assert sorted(((r.id, r.label) for r in frame.collect()), key=key) == theirs


def test_iceberg_runtime_reads_a_sparklink_upserted_table_as_the_changelog_replays(tables):
    """Issue 40's proof by a reader nobody here wrote: the table sparklink's upsert mode rewrote
    (copy-on-write overwrite snapshots), read by Iceberg's own reader, equals the dict."""
    theirs = {row[0]: (row[1], row[2]) for row in tables["read_upserted"]}
    assert len(theirs) == len(tables["read_upserted"]), "a key twice in Iceberg's read"
    assert theirs == tables["upserted"]
