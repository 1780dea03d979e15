"""The changelog contract (sparklink.sink.changelog): options and the reduction of one batch, no Spark."""

import pyarrow as pa
import pytest

from sparklink.errors import ConfigError
from sparklink.options import Options
from sparklink.sink.changelog import Changelog, ChangelogOptions, newer_than_stored, refuse_upsert


def changelog(**options):
    return Changelog.from_options(ChangelogOptions.options(options))


def test_append_is_the_default_and_refuses_changelog_options():
    assert changelog() is None
    with pytest.raises(ConfigError, match="sequenceColumn.*writeMode=upsert"):
        changelog(sequenceColumn="seq")


def test_upsert_needs_keys_present_in_the_data():
    with pytest.raises(ConfigError, match="keyColumns.*required"):
        changelog(writeMode="upsert")
    with pytest.raises(ConfigError, match="keyColumns.*twice"):
        changelog(writeMode="upsert", keyColumns="id,id")
    log = changelog(writeMode="upsert", keyColumns="id", opColumn="op")
    with pytest.raises(ConfigError, match=r"keyColumns.*\['id'\] are not in"):
        log.check_columns(["x", "op"])
    with pytest.raises(ConfigError, match="did you mean"):
        ChangelogOptions.options({"writeMode": "upsert", "keyColumn": "id"})


def test_last_change_per_key_by_sequence_and_deletes_by_op():
    log = changelog(writeMode="upsert", keyColumns="id", opColumn="op", sequenceColumn="seq")
    batch = pa.table({"id": [1, 2, 1, 3, 2, 4], "op": ["c", "c", "u", "c", "d", None],
                      "seq": [1, 5, 3, 2, 4, 9], "v": ["a", "b", "c", "d", "e", "f"]})
    reduced = log.reduce(batch)
    by_id = {row["id"]: row for row in reduced.rows.to_pylist()}
    assert by_id[1]["v"] == "c" and by_id[2]["v"] == "b" and by_id[3]["v"] == "d" and by_id[4]["v"] == "f"
    # key 2: seq 5 (an insert) is after seq 4 (the delete), so it is an upsert
    assert reduced.delete_keys().num_rows == 0
    assert reduced.upserts().column_names == ["id", "seq", "v"]
    deleting = log.reduce(pa.table({"id": [7, 7], "op": ["c", "d"], "seq": [1, 2], "v": ["x", None]}))
    assert deleting.delete_keys().to_pylist() == [{"id": 7, "seq": 2}]
    assert deleting.upserts().num_rows == 0


def test_without_sequence_the_batch_order_wins_and_custom_delete_values():
    log = changelog(writeMode="upsert", keyColumns="a,b", opColumn="kind", opDeleteValues="DELETE,gone")
    batch = pa.table({"a": [1, 1, 1], "b": ["x", "x", "y"], "kind": ["INSERT", "gone", "DELETE"], "v": [1, 2, 3]})
    reduced = log.reduce(batch)
    assert sorted(reduced.delete_keys().to_pylist(), key=str) == [{"a": 1, "b": "x"}, {"a": 1, "b": "y"}]


def _last_per_key(rows, keys, sequence=None):
    """The reduction written out in Python: per key the change with the greatest sequence value
    (or the last), in the order of the rows picked."""
    best = {}
    for position, row in enumerate(rows):
        key = tuple(row[k] for k in keys)
        rank = (row[sequence], position) if sequence else position
        if key not in best or rank > best[key][0]:
            best[key] = (rank, position)
    return [rows[position] for position in sorted(position for _, position in best.values())]


@pytest.mark.parametrize("sequence", [None, "seq"])
def test_reduction_matches_the_rule_on_many_rows_in_several_chunks(sequence):
    """Thousands of changes in several record batches, some keys repeated and some not, and a
    batch whose keys are all distinct (returned as it is): the rows picked, in the batch's order,
    are the rule's."""
    import random

    chance = random.Random(7)
    count = 5000
    seqs = chance.sample(range(10 * count), count)
    rows = [{"a": chance.randrange(300), "b": chance.choice("xyz"), "seq": seqs[n], "op": chance.choice("cud"),
             "v": n} for n in range(count)]
    options = {"writeMode": "upsert", "keyColumns": "a,b", "opColumn": "op"}
    log = changelog(**options, **({"sequenceColumn": sequence} if sequence else {}))
    table = pa.Table.from_batches(pa.Table.from_pylist(rows).to_batches(max_chunksize=700))
    reduced = log.reduce(table)
    assert reduced.rows.to_pylist() == _last_per_key(rows, ("a", "b"), sequence)
    assert reduced.deletes.to_pylist() == [row["op"] == "d" for row in reduced.rows.to_pylist()]
    distinct = pa.table({"a": list(range(count, 0, -1)), "b": ["k"] * count, "seq": seqs, "op": ["u"] * count})
    assert log.reduce(distinct).rows.equals(distinct)
    single = changelog(writeMode="upsert", keyColumns="a", **({"sequenceColumn": sequence} if sequence else {}))
    assert single.reduce(distinct).rows.equals(distinct)


def test_ties_and_nulls_are_refused_naming_the_key():
    log = changelog(writeMode="upsert", keyColumns="id", sequenceColumn="seq")
    with pytest.raises(ConfigError, match=r"key id=5 carry the same seq 3"):
        log.reduce(pa.table({"id": [5, 5, 6], "seq": [3, 3, 3]}))
    with pytest.raises(ConfigError, match=r"'seq' is null for key id=6"):
        log.reduce(pa.table({"id": [5, 6], "seq": [3, None]}))
    with pytest.raises(ConfigError, match="column 'id' is null"):
        log.reduce(pa.table({"id": [None, 6], "seq": [3, 4]}))


def test_a_change_older_than_the_stored_row_is_skipped():
    log = changelog(writeMode="upsert", keyColumns="id", sequenceColumn="seq")
    changes = pa.table({"id": [1, 2, 3, 4], "seq": [5, 5, 5, 5]})
    stored = pa.table({"id": [1, 2, 4], "seq": [4, 6, None]})
    assert newer_than_stored(log, changes, stored).to_pylist() == [True, False, True, True]



def test_stored_keys_of_another_arrow_type_are_compared_by_value():
    """A table's reader may give large_string keys (pyiceberg's scan does) and other integer
    widths where the micro-batch has string and int64: found by the CDC pipeline into Iceberg,
    whose merge failed with 'Incompatible data types for corresponding join field keys'."""
    log = changelog(writeMode="upsert", keyColumns="_table,id", sequenceColumn="seq")
    changes = pa.table({"_table": pa.array(["a", "a", "b"], pa.string()), "id": pa.array([1, 2, 1], pa.int64()),
                        "seq": [5, 5, 5]})
    stored = pa.table({"_table": pa.array(["a", "b"], pa.large_string()), "id": pa.array([2, 1], pa.int32()),
                       "seq": pa.array([6, 4], pa.int64())})
    assert newer_than_stored(log, changes, stored).to_pylist() == [True, False, True]

def test_the_file_sink_refuses_upsert_naming_the_table_formats():
    refuse_upsert(Options({"writemode": "append"}), "sparklink.files")
    with pytest.raises(ConfigError, match="writeMode.*sparklink.files.*sparklink.delta, sparklink.iceberg"):
        refuse_upsert(Options({"WriteMode": "upsert"}), "sparklink.files")
