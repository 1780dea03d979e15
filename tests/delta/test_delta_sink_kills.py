"""The Delta sink's real driver SIGKILL sequence: a stream of JSON files into ``sparklink.delta``
(table not created beforehand), the driver SIGKILLed three times mid-stream once the Delta log
shows progress, then a final availableNow run. delta-rs reads every id exactly once and the log
holds the stream's ``txn`` marker."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from deltalake import DeltaTable

from sparklink.delta.app_id import app_id_path
from sparklink.delta.files import file_tag
from tests.delta.jobs import json_to_delta, write_json_file
from tests.delta.readers import unreferenced_files

JOB = "tests.delta.jobs:json_to_delta"
FILES, ROWS_PER_FILE = 12, 5


def _versions(table: Path) -> int:
    log = table / "_delta_log"
    return len(list(log.glob("*.json"))) if log.is_dir() else 0


@pytest.mark.slow
def test_driver_sigkilled_three_times_mid_stream(driver, tmp_path, spark):
    src, table, ck = tmp_path / "in", tmp_path / "table", tmp_path / "ck"
    src.mkdir()
    for index in range(FILES):
        write_json_file(src, f"f-{index:03d}.json", range(index * ROWS_PER_FILE, (index + 1) * ROWS_PER_FILE))
    args = {"src": str(src), "table": str(table), "checkpoint": str(ck), "available_now": False}
    seen = 0
    for kill, jitter in enumerate((0.0, 0.3, 0.6), start=1):
        process = driver.start(JOB, args)
        target = seen + 2  # two more Delta versions (the first run: the table's creation and a batch)
        process.kill_when(lambda target=target: _versions(table) >= target, what=f"Delta log version {target - 1}",
                          timeout=240, jitter=jitter)
        seen = _versions(table)
    assert seen < FILES + 1, "the stream ended before the last kill: use more files"
    json_to_delta(spark, **dict(args, available_now=True))

    rows = DeltaTable(str(table)).to_pyarrow_table()
    counts = Counter(rows.column("id").to_pylist())
    assert {i: c for i, c in counts.items() if c > 1} == {}
    assert sorted(counts) == list(range(FILES * ROWS_PER_FILE))
    assert rows.column("grp").to_pylist() == [i % 3 for i in rows.column("id").to_pylist()]

    app_id = json.loads(app_id_path(ck).read_text())["appId"]
    markers = [json.loads(line)["txn"] for entry in sorted((table / "_delta_log").glob("*.json"))
               for line in entry.read_text().splitlines() if "txn" in json.loads(line)]
    assert markers and {m["appId"] for m in markers} == {app_id}
    versions = [m["version"] for m in markers]
    assert versions == sorted(set(versions)), f"a micro-batch committed twice: {versions}"
    assert DeltaTable(str(table)).transaction_version(app_id) == versions[-1]
    # a failed attempt's files are removed once its micro-batch commits; a kill inside that
    # clean-up may leave some, which then carry this stream's tag (left to VACUUM)
    tag = file_tag(app_id, "")
    assert all(Path(name).name.startswith(f"part-{tag}-") for name in unreferenced_files(table))
