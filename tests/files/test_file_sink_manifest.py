"""The manifest of finished files keeps every finished file listed after old state files are purged."""

from sparklink.files.sink.manifest import FinishedFileManifest
from sparklink.files.sink.part_files import PENDING, PartFile
from sparklink.files.sink.state import CompactionPlan, SinkState, StateStore


def part(name: str) -> PartFile:
    return PartFile(bucket="b", partition=0, path=f"b/.{name}.inprogress.s1", final=f"b/{name}", state=PENDING,
                    length=1, rows=1, created_at=0.0, last_write_at=0.0)


def test_fold_then_purge_keeps_every_finished_file(tmp_path):
    store = StateStore(tmp_path / "_sparklink" / "state")
    for batch in range(6):
        store.put(SinkState(batch_id=batch, committed_at=float(batch), finish=[part(f"part-{batch}")],
                            compactions=[CompactionPlan(bucket="b", inputs=[], tmp=f"b/.c{batch}", final=f"b/part-c{batch}")]
                            if batch == 3 else []))
    manifest = FinishedFileManifest(tmp_path)
    expected = {f"b/part-{b}" for b in range(6)} | {"b/part-c3"}
    assert manifest.finished_files() == expected
    manifest.fold_before(4)
    manifest.fold_before(4)  # a crash between fold and purge repeats the fold: harmless
    store.purge_before(4)
    assert store.batch_ids() == [4, 5]
    assert manifest.compacted().up_to_batch == 3
    assert manifest.finished_files() == expected


def test_compact_manifest_round_trip(tmp_path):
    from sparklink.files.sink.manifest import CompactManifest

    manifest = CompactManifest(up_to_batch=9, files=["a/part-1.parquet"])
    assert CompactManifest.from_json(manifest.to_json(), source="x") == manifest
