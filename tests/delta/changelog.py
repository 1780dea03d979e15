"""A generated changelog for the Delta upsert tests, and the expected table computed from it
independently: a plain dict replaying it micro-batch by micro-batch (test side)."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

CHANGELOG_SCHEMA = "id long, v string, op string, seq long"


def generate(batches: int, changes: int, keys: int, seed: int = 7) -> list[list[dict]]:
    """``batches`` lists of ``changes`` changes of keys ``0..keys-1``: inserts (``c``, ``r``,
    null op), updates (``u``), deletes (``d``), keys repeated within a batch, and about one in
    five sequence values older than changes already made (out of order). Sequence values are
    unique, so a key never ties within a batch."""
    rng = random.Random(seed)
    used: set[int] = set()
    counter, out = 0, []
    for batch in range(batches):
        rows = []
        for index in range(changes):
            counter += 1
            seq = 10 * counter
            if counter > 5 and rng.random() < 0.2:  # an older change arriving late
                seq = 10 * (counter - rng.randint(1, 5)) + rng.randint(1, 9)
                while seq in used:
                    seq += 1
            used.add(seq)
            op = rng.choice(["c", "u", "u", "d", "r", None])
            rows.append({"id": rng.randrange(keys), "v": None if op == "d" else f"v{batch}-{index}", "op": op,
                         "seq": seq})
        out.append(rows)
    return out


def replay(state: dict[int, tuple[str | None, int]], batch: list[dict]) -> None:
    """One micro-batch applied to ``state`` (key -> (v, seq)): per key the change with the
    greatest seq of the batch, applied only when its seq is at least the stored row's."""
    last: dict[int, dict] = {}
    for row in batch:
        if row["id"] not in last or row["seq"] > last[row["id"]]["seq"]:
            last[row["id"]] = row
    for key, row in last.items():
        if key in state and row["seq"] < state[key][1]:
            continue
        if row["op"] == "d":
            state.pop(key, None)
        else:
            state[key] = (row["v"], row["seq"])


def expected_state(batches: list[list[dict]]) -> dict[int, tuple[str | None, int]]:
    state: dict[int, tuple[str | None, int]] = {}
    for batch in batches:
        replay(state, batch)
    return state


def write_changelog_files(src: Path, batches: list[list[dict]], first_mtime: float = 1_700_000_000) -> None:
    """One JSON-lines file per micro-batch, modification times one second apart (Spark's file
    source with maxFilesPerTrigger=1 takes them in that order, one per micro-batch)."""
    src.mkdir(parents=True, exist_ok=True)
    for index, rows in enumerate(batches):
        path = src / f"changes-{index:03d}.json"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        os.utime(path, (first_mtime + index, first_mtime + index))


def spark_micro_batches(checkpoint: Path, batches: list[list[dict]]) -> list[list[dict]]:
    """The changes of each micro-batch as Spark's file source grouped the changelog files (one
    file per micro-batch, except where a driver died after the source logged a file and before the
    offset log took it: the restarted query then reads that file with the next one, as Spark's file
    source does), read from the query's checkpoint: micro-batch ``b`` reads the source log's
    entries after the ``logOffset`` of ``b - 1`` up to its own."""
    by_name = {f"changes-{index:03d}.json": rows for index, rows in enumerate(batches)}
    log_files: dict[int, list[str]] = {}
    for entry in (checkpoint / "sources" / "0").iterdir():
        if entry.name.startswith(".") or not entry.name.split(".")[0].isdigit():
            continue
        for line in entry.read_text().splitlines()[1:]:
            if line.strip():
                record = json.loads(line)
                names = log_files.setdefault(record["batchId"], [])
                name = record["path"].rsplit("/", 1)[-1]
                if name not in names:
                    names.append(name)
    offsets = {}
    for entry in (checkpoint / "offsets").iterdir():
        if entry.name.isdigit():
            offsets[int(entry.name)] = json.loads(entry.read_text().splitlines()[2])["logOffset"]
    grouped, previous = [], -1
    for batch_id in sorted(offsets):
        names = [n for log_id in range(previous + 1, offsets[batch_id] + 1) for n in log_files.get(log_id, [])]
        grouped.append([row for name in sorted(names) for row in by_name[name]])
        previous = offsets[batch_id]
    assert sorted(n for names in log_files.values() for n in names) == sorted(by_name), "files Spark never logged"
    return grouped
