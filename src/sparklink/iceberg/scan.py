"""Which data files a snapshot adds or holds (driver side), and the cached reads executors need.

Driver: :func:`ancestry` (oldest first), :func:`added_files` (what one snapshot adds, the
unit of the incremental scan), :func:`live_data_files` (everything one snapshot holds, for
``spark.read``). Both give :class:`DataFileRef`\\ s that name the manifest and the entry, so an
executor rebuilds exactly the ``DataFile`` the driver saw (:func:`data_file`).

A batch read applies the snapshot's live **position delete files** (every split names them; the
executor reads them with pyiceberg and drops the positions of its data file) and its live
**equality delete files**: each split names those that apply to its data file by the spec's
rules (the delete file's data sequence number strictly greater than the data file's; the same
partition spec and partition, or a delete file written with an unpartitioned spec, which applies
to every partition); :mod:`sparklink.iceberg.equality` drops the matching rows. Refused, naming
the snapshot or the file: delete files added by an append snapshot a stream reads; format v3
tables (deletion vectors).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from sparklink.errors import DataError

MAX_FORMAT_VERSION = 2


@dataclass(frozen=True, kw_only=True)
class DataFileRef:
    """One data file: entry ``entry`` (counting every entry, deleted ones too) of ``manifest``."""

    manifest: str
    spec_id: int
    entry: int
    path: str
    rows: int
    size: int
    deletes: tuple[str, ...] = ()  # position delete files that may hold rows of this file (batch reads)
    equality: tuple[DeleteFileRef, ...] = ()  # equality delete files that apply to this file (batch reads)


@dataclass(frozen=True, kw_only=True)
class DeleteFileRef:
    """One equality delete file: entry ``entry`` of the delete manifest ``manifest``."""

    manifest: str
    spec_id: int
    entry: int
    path: str

    def to_json(self) -> list:
        return [self.manifest, self.spec_id, self.entry, self.path]


def check_format(metadata, table_name: str) -> None:
    if metadata.format_version > MAX_FORMAT_VERSION:
        raise DataError(f"Iceberg table {table_name} is format v{metadata.format_version}; the sparklink.iceberg "
                        f"source reads format v1 and v2 tables (v3 features such as deletion vectors and row "
                        "lineage are not served)")


def head(metadata, branch: str, table_name: str):
    """The snapshot ``branch`` points at (``main``: the current one); None for a table without
    snapshots; a missing branch other than ``main`` is refused."""
    ref = metadata.refs.get(branch)
    if ref is None:
        if branch == "main":
            return None
        raise DataError(f"Iceberg table {table_name} has no branch '{branch}' (has {', '.join(sorted(metadata.refs))})")
    return metadata.snapshot_by_id(ref.snapshot_id)


def ancestry(metadata, branch: str = "main", table_name: str = "") -> list:
    """The head of ``branch`` and its ancestors, oldest first ([] for a table without snapshots)."""
    from pyiceberg.table.snapshots import ancestors_of

    current = head(metadata, branch, table_name)
    return list(reversed(list(ancestors_of(current, metadata)))) if current is not None else []


def _entries(io, manifest) -> list:
    return manifest.fetch_manifest_entry(io, discard_deleted=False)


@dataclass(frozen=True, kw_only=True)
class AddedFiles:
    """What one snapshot adds: its data files (manifest-list then manifest order, deterministic)
    and the first of its manifests that adds delete files, if any."""

    data: list[DataFileRef]
    delete_manifest: str | None = None

    def check_no_deletes(self, snapshot_id: int, table_name: str) -> None:
        if self.delete_manifest is not None:
            raise DataError(f"Iceberg table {table_name}: snapshot {snapshot_id} adds delete files (manifest "
                            f"{self.delete_manifest}); a sparklink.iceberg stream does not follow position or "
                            "equality deletes (a spark.read applies them)")


def added_files(io, snapshot) -> AddedFiles:
    """The files ``snapshot`` adds (the entries its own manifests mark as added)."""
    from pyiceberg.manifest import ManifestContent, ManifestEntryStatus

    refs = []
    delete_manifest = None
    for manifest in snapshot.manifests(io):
        if manifest.added_snapshot_id != snapshot.snapshot_id:
            continue
        if manifest.content == ManifestContent.DELETES:
            if manifest.has_added_files() and delete_manifest is None:
                delete_manifest = manifest.manifest_path
            continue
        for index, entry in enumerate(_entries(io, manifest)):
            if entry.status == ManifestEntryStatus.ADDED and entry.snapshot_id == snapshot.snapshot_id:
                refs.append(_ref(manifest, index, entry))
    return AddedFiles(data=refs, delete_manifest=delete_manifest)


def live_data_files(io, snapshot, metadata, table_name: str) -> list[DataFileRef]:
    """Every data file of ``snapshot`` (a batch read), each with the snapshot's live position
    delete files (a position delete names the data file's path, which is never reused, so one
    that does not concern a file removes nothing from it) and the live equality delete files
    that apply to it (``metadata``: the table's, for its partition specs)."""
    from dataclasses import replace

    from pyiceberg.manifest import (
        INITIAL_SEQUENCE_NUMBER,
        DataFileContent,
        ManifestContent,
        ManifestEntryStatus,
    )

    data: list[tuple[DataFileRef, int, object]] = []  # (ref, data sequence number, partition)
    deletes: list[str] = []
    global_equality: list[tuple[DeleteFileRef, int]] = []  # (ref, data sequence number)
    partition_equality: dict[tuple[int, object], list[tuple[DeleteFileRef, int]]] = {}
    for manifest in snapshot.manifests(io):
        entries = _entries(io, manifest)
        if manifest.content == ManifestContent.DELETES:
            for index, entry in enumerate(entries):
                if entry.status == ManifestEntryStatus.DELETED:
                    continue
                file = entry.data_file
                if file.content == DataFileContent.POSITION_DELETES:
                    deletes.append(file.file_path)
                    continue
                if file.content != DataFileContent.EQUALITY_DELETES or not file.equality_ids:
                    raise DataError(f"Iceberg table {table_name}: snapshot {snapshot.snapshot_id} has the delete file "
                                    f"{file.file_path} of content {file.content.name} without equality ids, which "
                                    "the sparklink.iceberg source does not apply")
                spec_id = manifest.partition_spec_id
                delete = DeleteFileRef(manifest=manifest.manifest_path, spec_id=spec_id, entry=index,
                                       path=file.file_path)
                sequence = entry.sequence_number if entry.sequence_number is not None else INITIAL_SEQUENCE_NUMBER
                if metadata.specs()[spec_id].is_unpartitioned():
                    global_equality.append((delete, sequence))
                else:
                    partition_equality.setdefault((spec_id, file.partition), []).append((delete, sequence))
            continue
        for index, entry in enumerate(entries):
            if entry.status != ManifestEntryStatus.DELETED:
                sequence = entry.sequence_number if entry.sequence_number is not None else INITIAL_SEQUENCE_NUMBER
                data.append((_ref(manifest, index, entry), sequence, entry.data_file.partition))
    refs = []
    for ref, sequence, partition in data:
        candidates = global_equality + partition_equality.get((ref.spec_id, partition), [])
        equality = tuple(sorted((found for found, found_sequence in candidates if found_sequence > sequence),
                                key=lambda found: found.path))
        refs.append(replace(ref, deletes=tuple(sorted(deletes)), equality=equality)
                    if deletes or equality else ref)
    return refs


def _ref(manifest, index: int, entry) -> DataFileRef:
    data = entry.data_file
    return DataFileRef(manifest=manifest.manifest_path, spec_id=manifest.partition_spec_id, entry=index,
                       path=data.file_path, rows=data.record_count, size=data.file_size_in_bytes)


# executor side: a Python worker reads many splits of the same table; metadata files and
# manifests are immutable, so they are cached by location.

@lru_cache(maxsize=8)
def _cached_metadata(location: str, properties: tuple):
    from pyiceberg.io import load_file_io
    from pyiceberg.serializers import FromInputFile

    return FromInputFile.table_metadata(load_file_io(dict(properties), location).new_input(location))


@lru_cache(maxsize=32)
def _cached_entries(manifest_path: str, spec_id: int, properties: tuple) -> list:
    from pyiceberg.io import load_file_io
    from pyiceberg.manifest import ManifestFile

    io = load_file_io(dict(properties), manifest_path)
    manifest = ManifestFile.from_args(manifest_path=manifest_path, partition_spec_id=spec_id)
    return manifest.fetch_manifest_entry(io, discard_deleted=False)


def table_metadata(location: str, properties: dict[str, str]):
    """Executor side: the table metadata file at ``location`` (cached per worker process)."""
    return _cached_metadata(location, tuple(sorted(properties.items())))


def data_file(manifest: str, spec_id: int, entry: int, path: str, properties: dict[str, str]):
    """Executor side: the ``DataFile`` of entry ``entry`` of ``manifest`` (checked against ``path``)."""
    entries = _cached_entries(manifest, spec_id, tuple(sorted(properties.items())))
    if entry >= len(entries) or entries[entry].data_file.file_path != path:
        raise DataError(f"Iceberg manifest {manifest}: entry {entry} is not data file {path} (the manifest changed, "
                        "which Iceberg never does)")
    return entries[entry].data_file
