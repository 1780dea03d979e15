"""Which splits one Spark task reads (driver side, while a batch is planned).

Every Spark task of a Python source costs a fixed price before it reads a byte: the task is
scheduled, the reader is unpickled in a Python worker and the rows go back through Arrow. A
source with one split per small data file (a Delta version, an Iceberg snapshot) would pay it
once per file: at 8 files of 1.5 MB the tasks alone cost 0.4 s more than 2 tasks reading the
same bytes. As Spark's file sources pack small files into one task (``maxPartitionBytes``,
``openCostInBytes``), a source packs its splits here: consecutive splits, in planned order, go
into one task until the task holds about ``total cost / tasks`` bytes, so every core gets work
and no task of several splits gets more than :data:`MAX_TASK_BYTES`. A split larger than the target is a task of its
own; nothing is ever cut (a split stays the unit a reader reads).

The file source packs its own segments (cut from files first) with the same sizes:
:func:`target_bytes` and :data:`OPEN_COST_BYTES`.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from typing import TypeVar

OPEN_COST_BYTES = 256 * 1024  # what opening a file costs, in bytes of reading (packing heuristic)
MIN_TASK_BYTES = 4 * 1024 * 1024
MAX_TASK_BYTES = 128 * 1024 * 1024

T = TypeVar("T")


def default_tasks() -> int:
    """The tasks a batch is spread over unless told: the machine's cores (Spark's default
    parallelism in local mode; the planning process has no Spark context to ask)."""
    return os.cpu_count() or 2


def target_bytes(total_cost: int, tasks: int, max_bytes: int = MAX_TASK_BYTES) -> int:
    """Bytes per task (as Spark's ``maxSplitBytes``): enough tasks to use ``tasks`` cores,
    none below :data:`MIN_TASK_BYTES` (small batches stay in few tasks) nor above ``max_bytes``."""
    return max(1, min(max_bytes, max(MIN_TASK_BYTES, math.ceil(total_cost / max(1, tasks)))))


def pack(items: Sequence[T], size_of: Callable[[T], int], *, tasks: int | None = None) -> list[list[T]]:
    """``items`` in order, cut into consecutive groups of about :func:`target_bytes` each (a
    group's cost is its items' sizes plus :data:`OPEN_COST_BYTES` per item). An item joins the
    current group while at least half of it fits under the target, so that files of equal size
    fill the tasks evenly (8 files of 6.7 MB on 2 cores: 4 and 4, not 3, 3 and 2, a third task
    run after the other two); an item larger than the target is a group of its own, and no group
    of several items exceeds :data:`MAX_TASK_BYTES`. Deterministic: the same items give the same
    groups (a replayed batch reads the same tasks)."""
    if not items:
        return []
    costs = [size_of(item) + OPEN_COST_BYTES for item in items]
    target = target_bytes(sum(costs), tasks or default_tasks())
    groups: list[list[T]] = []
    current: list[T] = []
    current_cost = 0
    for item, cost in zip(items, costs, strict=True):
        # a large item stands alone; a small one joins while half of it fits (so nothing joins a
        # group already past the target)
        if current and (cost > target or current_cost + cost / 2 > target or current_cost + cost > MAX_TASK_BYTES):
            groups.append(current)
            current, current_cost = [], 0
        current.append(item)
        current_cost += cost
    groups.append(current)
    return groups
