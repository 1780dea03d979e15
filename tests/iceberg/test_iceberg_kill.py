"""The Iceberg connector family's one real driver SIGKILL sequence: JSON files streamed into
``sparklink.iceberg`` on a sqlite SQL catalog with a local warehouse, the table not created
beforehand; the driver's whole process group is SIGKILLed three times, each time once a new
snapshot is in the catalog (observable progress, no timer), then an availableNow run finishes.
pyiceberg's scan reads every id exactly once."""

from __future__ import annotations

import json

import pytest

from tests.iceberg.iceberg_readers import catalog_options, scan_ids, sparklink_snapshots

JOB = "tests.iceberg.jobs_iceberg:json_to_iceberg"
FILES, ROWS_PER_FILE = 10, 40


def snapshot_count(options: dict) -> int:
    from pyiceberg.catalog import load_catalog
    from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

    properties = {k[len("catalog."):]: v for k, v in options.items() if k.startswith("catalog.")}
    try:
        return len(load_catalog("default", **properties).load_table(options["table"]).snapshots())
    except (NoSuchTableError, NoSuchNamespaceError):
        return 0


@pytest.mark.slow
def test_driver_sigkilled_three_times_mid_stream(driver, tmp_path):
    landing = tmp_path / "landing"
    landing.mkdir()
    for number in range(FILES):
        lines = [json.dumps({"id": number * ROWS_PER_FILE + i, "label": f"row-{number}-{i}"})
                 for i in range(ROWS_PER_FILE)]
        (landing / f"part-{number:03d}.json").write_text("\n".join(lines) + "\n")
    options = catalog_options(tmp_path / "iceberg")
    args = {"landing": str(landing), "checkpoint": str(tmp_path / "ck"), "options": options, "available_now": False}
    for _kill in range(3):
        target = snapshot_count(options) + 1
        process = driver.start(JOB, args)
        process.kill_when(lambda target=target: snapshot_count(options) >= target, what=f"snapshot {target} in the catalog")
        assert snapshot_count(options) < FILES, "the stream ended before the kill"
    finished = driver.run(JOB, {**args, "available_now": True}, timeout=600)
    assert finished.ok, finished.output
    assert scan_ids(options) == list(range(FILES * ROWS_PER_FILE))
    batches = [int(s["sparklink.batch-id"]) for s in sparklink_snapshots(options)]
    assert batches == sorted(set(batches))  # one snapshot per micro-batch, none twice
