"""The ``sparklink.iceberg`` source's enumerator and reader without Spark (milliseconds): tables
written by pyiceberg (``append``, ``add_files``, ``delete``, ``overwrite``), the offsets a stream
would log, the limits, the starting points and the skip options. What the splits read is compared
with pyiceberg's own scan."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog import load_catalog

from sparklink.errors import ConfigError, DataError
from sparklink.iceberg.offsets import IcebergOffset
from sparklink.iceberg.scan import check_format
from sparklink.iceberg.source import IcebergSource
from sparklink.source import READ_ALL, ReadLimit
from tests.iceberg.source_tables import add_equality_deletes, add_position_deletes

SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("label", pa.string())])


def rows(ids) -> pa.Table:
    ids = list(ids)
    return pa.table({"id": pa.array(ids, pa.int64()), "label": [f"l-{i}" for i in ids]}, schema=SCHEMA)


@pytest.fixture
def table_options(tmp_path):
    (tmp_path / "wh").mkdir()
    return {"table": "db.src", "catalog.type": "sql", "catalog.uri": f"sqlite:///{tmp_path}/catalog.db",
            "catalog.warehouse": f"file://{tmp_path}/wh"}


def catalog(options):
    return load_catalog("default", **{k[8:]: v for k, v in options.items() if k.startswith("catalog.")})


@pytest.fixture
def table(table_options, tmp_path):
    """Snapshots: append 0..9, add_files of 3 files (10..39), append 40..49."""
    cat = catalog(table_options)
    cat.create_namespace("db")
    created = cat.create_table("db.src", schema=SCHEMA)
    created.append(rows(range(10)))
    files = []
    for n in range(3):
        path = tmp_path / f"import-{n}.parquet"
        pq.write_table(rows(range(10 + 10 * n, 20 + 10 * n)), path)
        files.append(f"file://{path}")
    created.add_files(files)
    created.append(rows(range(40, 50)))
    return cat.load_table("db.src")


def drain(source, start=None, max_files=None, until=None):
    """Run the enumerator as Spark would (offsets until no progress); read every split with the
    source's reader. Returns (ids read, offsets logged)."""
    enumerator = source.create_enumerator(streaming=True)
    offset = start if start is not None else enumerator.initial_offset()
    reader = source.create_reader(source.schema())
    ids, offsets = [], []
    while True:
        end = enumerator.latest_offset(offset, ReadLimit(max_files=max_files, until=until))
        if end == offset:
            return ids, offsets
        for split in enumerator.plan_splits(offset, end):
            for batch in reader.read(split):
                ids.extend(batch.column("id").to_pylist())
        offsets.append(end)
        offset = end


def test_default_start_is_the_oldest_ancestor_and_every_file_is_read_once(table, table_options):
    ids, offsets = drain(IcebergSource(table_options), max_files=2)
    assert sorted(ids) == sorted(table.scan().to_arrow().column("id").to_pylist()) == list(range(50))
    assert len(ids) == 50
    # 5 data files, 2 per micro-batch: the add_files snapshot is cut after its first file
    add_files_snapshot = table.snapshots()[1].snapshot_id
    assert offsets[0] == IcebergOffset(snapshot_id=add_files_snapshot, position=1).to_json()
    assert len(offsets) == 3
    # a replay of a logged range plans the same splits
    enumerator = IcebergSource(table_options).create_enumerator(streaming=True)
    first = enumerator.plan_splits(offsets[0], offsets[1])
    assert [s.to_json() for s in first] == [s.to_json() for s in enumerator.plan_splits(offsets[0], offsets[1])]
    assert [s.split_id for s in first] == [f"s{add_files_snapshot}-1", f"s{add_files_snapshot}-2"]


def test_new_snapshots_are_read_from_the_logged_offset(table, table_options):
    source = IcebergSource(table_options)
    _, offsets = drain(source)
    catalog(table_options).load_table("db.src").append(rows(range(50, 60)))
    ids, _ = drain(source, start=offsets[-1])
    assert ids == list(range(50, 60))


def test_starting_snapshot_id_is_inclusive_and_must_be_an_ancestor(table, table_options):
    second = table.snapshots()[1].snapshot_id
    ids, _ = drain(IcebergSource({**table_options, "startingSnapshotId": str(second)}))
    assert sorted(ids) == list(range(10, 50))
    with pytest.raises(ConfigError, match="startingSnapshotId.*no snapshot 42"):
        IcebergSource({**table_options, "startingSnapshotId": "42"}).create_enumerator(streaming=True).initial_offset()


def test_starting_timestamp(table, table_options):
    third = table.snapshots()[2]
    ids, _ = drain(IcebergSource({**table_options, "startingTimestamp": str(third.timestamp_ms)}))
    assert sorted(ids) == list(range(40, 50))
    later = IcebergSource({**table_options, "startingTimestamp": str(third.timestamp_ms + 60_000)})
    start = later.create_enumerator(streaming=True).initial_offset()
    assert drain(later, start=start)[0] == []  # nothing at or after that time yet
    catalog(table_options).load_table("db.src").append(rows(range(50, 55)))
    assert drain(later, start=start)[0] == list(range(50, 55))
    with pytest.raises(ConfigError, match="startingTimestamp.*not a time"):
        IcebergSource({**table_options, "startingTimestamp": "yesterday"})


def test_available_now_stops_at_the_snapshot_current_when_it_started(table, table_options):
    source = IcebergSource(table_options)
    target = source.create_enumerator(streaming=True).available_now_offset(None)
    catalog(table_options).load_table("db.src").append(rows(range(50, 60)))
    ids, _ = drain(source, max_files=1, until=target)
    assert sorted(ids) == list(range(50))


def test_delete_and_overwrite_snapshots_fail_the_stream_unless_skipped(table, table_options):
    source = IcebergSource(table_options)
    _, offsets = drain(source)
    live = catalog(table_options).load_table("db.src")
    live.delete("id >= 40")                 # removes a whole file: a delete snapshot
    deleted = catalog(table_options).load_table("db.src").current_snapshot()
    assert deleted.summary.operation.value == "delete"
    with pytest.raises(DataError, match=f"snapshot {deleted.snapshot_id} is a delete snapshot.*skipDeleteSnapshots"):
        drain(source, start=offsets[-1])
    live = catalog(table_options).load_table("db.src")
    # pyiceberg's overwrite: an overwrite snapshot (the file of ids 0..9 rewritten without 0..4),
    # then an append snapshot of the new rows
    live.overwrite(rows(range(100, 105)), overwrite_filter="id < 5")
    overwritten = [s for s in catalog(table_options).load_table("db.src").snapshots()
                   if s.summary.operation.value == "overwrite"][-1]
    skip_delete = IcebergSource({**table_options, "skipDeleteSnapshots": "true"})
    with pytest.raises(DataError, match=f"snapshot {overwritten.snapshot_id} is an overwrite"):
        drain(skip_delete, start=offsets[-1])
    catalog(table_options).load_table("db.src").append(rows(range(200, 203)))
    skip_both = IcebergSource({**table_options, "skipDeleteSnapshots": "true", "skipOverwriteSnapshots": "true"})
    ids, _ = drain(skip_both, start=offsets[-1])
    # the overwrite snapshot's own added file (ids 5..9 rewritten) is skipped with it, as by Iceberg's
    # Spark source; the append after it and the later one are read
    assert ids == [100, 101, 102, 103, 104, 200, 201, 202]


def test_a_logged_snapshot_that_left_the_ancestry_is_refused(table, table_options):
    source = IcebergSource(table_options)
    _, offsets = drain(source)
    table.manage_snapshots().set_current_snapshot(table.snapshots()[0].snapshot_id).commit()
    expected = f"snapshot {offsets[-1]['snapshot']} is not an ancestor of the head of branch 'main'"
    with pytest.raises(DataError, match=expected):
        drain(source, start=offsets[-1])


def test_batch_reads_and_time_travel(table, table_options):
    def batch_ids(options):
        source = IcebergSource(options)
        enumerator = source.create_enumerator(streaming=False)
        start = enumerator.initial_offset()
        reader = source.create_reader(source.schema())
        return sorted(i for split in enumerator.plan_splits(start, enumerator.latest_offset(start, READ_ALL))
                      for batch in reader.read(split) for i in batch.column("id").to_pylist())

    assert batch_ids(table_options) == list(range(50))
    first, second = table.snapshots()[0], table.snapshots()[1]
    assert batch_ids({**table_options, "snapshotId": str(second.snapshot_id)}) == list(range(40))
    assert batch_ids({**table_options, "asOfTimestamp": str(second.timestamp_ms)}) == list(range(40))
    with pytest.raises(ConfigError, match="asOfTimestamp.*no snapshot"):
        batch_ids({**table_options, "asOfTimestamp": str(first.timestamp_ms - 1)})
    with pytest.raises(ConfigError, match="maxFilesPerTrigger.*spark.readStream only"):
        IcebergSource({**table_options, "maxFilesPerTrigger": "1"}).create_enumerator(streaming=False)
    with pytest.raises(ConfigError, match="snapshotId.*spark.read only"):
        IcebergSource({**table_options, "snapshotId": str(first.snapshot_id)}).create_enumerator(streaming=True)


def test_offsets_are_versioned():
    offset = IcebergOffset(snapshot_id=2**62 + 5, position=3)
    assert IcebergOffset.from_json(offset.to_json()) == offset
    with pytest.raises(DataError, match="not version 1"):
        IcebergOffset.from_json({"v": 2, "snapshot": 1, "position": 0})


def test_refusals(table_options, tmp_path):
    with pytest.raises(ConfigError, match="no Iceberg table 'db.src'"):
        IcebergSource(table_options)
    cat = catalog(table_options)
    cat.create_namespace("db")
    cat.create_table("db.src", schema=SCHEMA)
    with pytest.raises(ConfigError, match="unknown option"):
        IcebergSource({**table_options, "startingVersion": "0"})
    with pytest.raises(ConfigError, match="'path'.*not a path"):
        IcebergSource({**table_options, "path": "/data/db/src"})
    # pyiceberg 0.12 cannot write a v3 table's metadata, so the check is given v3 metadata directly
    v3 = type("Metadata", (), {"format_version": 3})()
    with pytest.raises(DataError, match="db.v3 is format v3"):
        check_format(v3, "db.v3")
    # an empty table: a stream starts before whatever snapshot comes, a batch read is empty
    source = IcebergSource(table_options)
    start = source.create_enumerator(streaming=True).initial_offset()
    assert drain(source, start=start)[0] == []
    cat.load_table("db.src").append(rows(range(3)))
    assert drain(source, start=start)[0] == [0, 1, 2]


def test_a_branch_is_read_from_its_own_ancestry(table, table_options):
    live = catalog(table_options).load_table("db.src")
    live.manage_snapshots().create_branch(table.snapshots()[0].snapshot_id, "audit").commit()
    catalog(table_options).load_table("db.src").append(rows(range(90, 95)), branch="audit")
    ids, _ = drain(IcebergSource({**table_options, "branch": "audit"}))
    assert sorted(ids) == list(range(10)) + list(range(90, 95))  # main's later snapshots are not on it
    with pytest.raises(DataError, match="no branch 'nope'"):
        IcebergSource({**table_options, "branch": "nope"})
    with pytest.raises(ConfigError, match="branch.*cannot be given together with snapshotId"):
        IcebergSource({**table_options, "branch": "audit", "snapshotId": "1"})


def test_delete_files_a_stream_meets_are_refused_by_name():
    """A snapshot adding delete files is refused by a stream (given a snapshot whose manifest list
    holds a delete manifest directly: the listing's only input)."""
    from types import SimpleNamespace

    from pyiceberg.manifest import DataFileContent, ManifestContent, ManifestEntryStatus

    from sparklink.iceberg.scan import added_files

    entry = SimpleNamespace(status=ManifestEntryStatus.ADDED, snapshot_id=7,
                            data_file=SimpleNamespace(file_path="file:///wh/data/deletes-1.parquet",
                                                      content=DataFileContent.EQUALITY_DELETES))
    manifest = SimpleNamespace(content=ManifestContent.DELETES, added_snapshot_id=7, manifest_path="m-1.avro",
                               has_added_files=lambda: True, fetch_manifest_entry=lambda io, discard_deleted: [entry])
    snapshot = SimpleNamespace(snapshot_id=7, manifests=lambda io: [manifest])
    added = added_files(None, snapshot)
    assert added.data == [] and added.delete_manifest == "m-1.avro"  # a skipped snapshot may add them
    with pytest.raises(DataError, match="snapshot 7 adds delete files.*m-1.avro"):
        added.check_no_deletes(7, "db.src")


def batch_read(options, column="id"):
    """What a ``spark.read`` of ``options`` reads, through the source's splits and reader (sorted)."""
    source = IcebergSource(options)
    enumerator = source.create_enumerator(streaming=False)
    start = enumerator.initial_offset()
    reader = source.create_reader(source.schema())
    values = [value for split in enumerator.plan_splits(start, enumerator.latest_offset(start, READ_ALL))
              for batch in reader.read(split) for value in batch.column(column).to_pylist()]
    return sorted(values, key=lambda value: (value is None, value))


def labelled(ids, nulls=()) -> pa.Table:
    ids = list(ids)
    return pa.table({"id": pa.array(ids, pa.int64()), "label": [None if i in nulls else f"l-{i}" for i in ids]},
                    schema=SCHEMA)


def test_a_batch_read_applies_equality_delete_files(table_options):
    """Equality delete files as Flink's upsert writer commits them, by one column and by two, with
    null keys, one committed with the upserted rows in the same snapshot (same sequence number:
    they stay), then a data file appended after them, and time travel to every snapshot.
    pyiceberg 0.12's own scan refuses equality deletes, so each expected set below is worked out
    by hand from the spec's rule: a delete row removes the rows equal to it on its columns (null
    equals null) in data files of a strictly lower data sequence number."""
    cat = catalog(table_options)
    cat.create_namespace("db")
    cat.create_table("db.src", schema=SCHEMA)

    def live():
        return catalog(table_options).load_table("db.src")

    live().append(labelled(range(10), nulls={7, 8}))      # seq 1: file A
    live().append(labelled(range(10, 20), nulls={15}))    # seq 2: file B
    add_equality_deletes(live(), {"id": [1, 12, 25]}, rows=labelled([12]))  # seq 3: no 25 yet; a new 12 stays
    add_equality_deletes(live(), {"id": [2, 3, 7, 15], "label": ["l-2", "nope", None, "l-15"]})  # seq 4
    add_equality_deletes(live(), {"label": [None]})       # seq 5: every row with a null label so far
    live().append(pa.concat_tables([labelled(range(20, 30), nulls={29}), labelled([1, 2])]))  # seq 6: file C
    with pytest.raises(ValueError, match="does not yet support equality deletes"):
        live().scan().to_arrow()

    old = list(range(20))
    expected = {
        1: list(range(10)),
        2: old,
        3: [i for i in old if i != 1],  # the old 12 goes, the new 12 stays
        4: [i for i in old if i not in (1, 2, 7)],  # (3, nope) and (15, l-15) match nothing
        5: [i for i in old if i not in (1, 2, 7, 8, 15)],
        6: sorted([*(i for i in old if i not in (1, 2, 7, 8, 15)), *range(20, 30), 1, 2]),  # C is newer
    }
    snapshots = [s.snapshot_id for s in live().snapshots()]
    for number, snapshot_id in enumerate(snapshots, start=1):
        assert batch_read({**table_options, "snapshotId": str(snapshot_id)}) == expected[number], number
    assert batch_read(table_options) == expected[6]
    assert batch_read(table_options, "label")[-1:] == [None]  # 29's only, appended after the null delete
    assert batch_read(table_options, "label").count(None) == 1

    # with a position delete on file A as well (the manifest's row count is checked with both)
    first = next(task.file.file_path for task in live().scan(snapshot_id=snapshots[0]).plan_files())
    add_position_deletes(live(), {first: [0, 4, 7]})  # ids 0, 4 and 7 (7 is deleted by equality too)
    assert batch_read(table_options) == [i for i in expected[6] if i not in (0, 4)]
    with pytest.raises(DataError, match="is an overwrite snapshot, which an append stream cannot follow"):
        drain(IcebergSource(table_options))


def test_equality_deletes_apply_within_their_partition_or_globally(table_options):
    """A table whose spec evolved from unpartitioned (spec 0) to identity(label) (spec 1): an
    equality delete written with spec 1 in partition ``label=a`` removes rows of that partition
    only; one written with the unpartitioned spec 0 applies to every partition (a global delete)."""
    from pyiceberg.transforms import IdentityTransform
    from pyiceberg.typedef import Record

    cat = catalog(table_options)
    cat.create_namespace("db")
    created = cat.create_table("db.src", schema=SCHEMA)
    with created.update_spec() as update:
        update.add_field("label", IdentityTransform(), "label")
    table = cat.load_table("db.src")
    assert [s.spec_id for s in table.metadata.partition_specs] == [0, 1] and table.metadata.default_spec_id == 1
    table.append(pa.table({"id": pa.array([1, 2, 3, 4], pa.int64()), "label": ["a", "a", "b", "b"]}, schema=SCHEMA))
    add_equality_deletes(cat.load_table("db.src"), {"id": [1, 3]}, spec_id=1, partition=Record("a"))
    assert batch_read(table_options) == [2, 3, 4]  # 3 is in partition b
    add_equality_deletes(cat.load_table("db.src"), {"id": [4]}, spec_id=0, partition=Record())
    assert batch_read(table_options) == [2, 3]


def test_a_batch_read_applies_position_delete_files(table, table_options):
    """Position delete files on two of the table's data files (one of them an add_files import)
    in two snapshots: the source's splits read what pyiceberg's own scan reads (which applies
    them), an older snapshot still reads the deleted rows, and a stream refuses the snapshot that
    adds them (an ``overwrite``, as Iceberg's row deltas are: an append stream cannot follow them)."""
    files = sorted((task.file.file_path, task.file.record_count) for task in table.scan().plan_files())
    first, imported = files[0][0], next(path for path, _ in files if "import-1" in path)
    add_position_deletes(table, {first: [0, 3]})
    add_position_deletes(catalog(table_options).load_table("db.src"), {imported: [1, 2, 9], first: [5]})
    table = catalog(table_options).load_table("db.src")
    expected = sorted(table.scan().to_arrow().column("id").to_pylist())
    assert len(expected) == 50 - 6

    def batch_ids(options):
        source = IcebergSource(options)
        enumerator = source.create_enumerator(streaming=False)
        start = enumerator.initial_offset()
        reader = source.create_reader(source.schema())
        return sorted(i for split in enumerator.plan_splits(start, enumerator.latest_offset(start, READ_ALL))
                      for batch in reader.read(split) for i in batch.column("id").to_pylist())

    assert batch_ids(table_options) == expected
    before = table.snapshots()[-2].snapshot_id
    assert len(batch_ids({**table_options, "snapshotId": str(before)})) == 50 - 2
    with pytest.raises(DataError, match="is an overwrite snapshot, which an append stream cannot follow"):
        drain(IcebergSource(table_options))
