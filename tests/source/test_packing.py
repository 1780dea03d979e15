"""Small splits are packed into few Spark tasks, in order, deterministically; a large one stays alone."""

from sparklink.source import Split
from sparklink.source.packing import MAX_TASK_BYTES, MIN_TASK_BYTES, pack, target_bytes
from sparklink.spark.source_adapter import SplitPartition

MiB = 1024 * 1024


def _splits(sizes):
    return [Split(split_id=f"v{n}-0", state={"path": f"f{n}.parquet", "size": size}) for n, size in enumerate(sizes)]


def test_small_files_of_one_batch_go_to_one_task_per_core_in_order():
    splits = _splits([int(1.5 * MiB)] * 8)  # the Delta benchmark's 8 versions
    groups = pack(splits, lambda s: s.state["size"], tasks=2)
    assert [len(g) for g in groups] == [4, 4]
    assert [s for g in groups for s in g] == splits  # every split once, in planned order
    assert pack(splits, lambda s: s.state["size"], tasks=2) == groups  # a replayed batch plans the same tasks


def test_files_of_nearly_equal_size_fill_the_cores_evenly():
    """8 files of about 6.7 MB on 2 cores (the Delta benchmark's users table): two tasks of 4, not
    3, 3 and 2 (a third task would run after the other two)."""
    sizes = [7_030_000 + (n % 3) * 20_000 for n in range(8)]
    groups = pack(_splits(sizes), lambda s: s.state["size"], tasks=2)
    assert [len(g) for g in groups] == [4, 4]
    many = pack(_splits([MiB] * 1000), lambda s: s.state["size"], tasks=2)  # 1.25 GiB of cost: capped tasks
    assert all(sum(s.state["size"] for s in g) + len(g) * 256 * 1024 <= MAX_TASK_BYTES for g in many)
    assert [s for g in many for s in g] == _splits([MiB] * 1000)


def test_a_few_tiny_files_stay_in_one_task_and_large_ones_are_tasks_of_their_own():
    assert [len(g) for g in pack(_splits([1000] * 5), lambda s: s.state["size"], tasks=2)] == [5]
    large = _splits([200 * MiB, 10, 200 * MiB])  # above MAX_TASK_BYTES: each its own task, never cut
    groups = pack(large, lambda s: s.state["size"], tasks=2)
    assert [[s.split_id for s in g] for g in groups] == [["v0-0"], ["v1-0"], ["v2-0"]]
    assert pack([], lambda s: 0) == []


def test_target_is_bounded():
    assert target_bytes(1, 2) == MIN_TASK_BYTES
    assert target_bytes(10 * MAX_TASK_BYTES, 2) == MAX_TASK_BYTES
    assert target_bytes(100 * MiB, 4) == 25 * MiB


def test_a_task_partition_carries_its_splits_in_order():
    splits = _splits([1, 2, 3])
    assert SplitPartition(splits).splits == splits
