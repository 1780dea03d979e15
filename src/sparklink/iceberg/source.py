"""The ``sparklink.iceberg`` source (FLIP-27 shape on the Source SDK): splits are data files.

* ``spark.read``: the data files of one snapshot (the current one, ``snapshotId`` or the
  snapshot current at ``asOfTimestamp``).
* ``spark.readStream``: an incremental append scan. The enumerator walks the ancestry of the
  table's current snapshot (or of the head of ``branch``), oldest first, and admits the data
  files each ``append`` snapshot adds (manifest order), at most ``maxFilesPerTrigger`` per
  micro-batch. The offset in Spark's
  checkpoint is (snapshot id, position) (:mod:`sparklink.iceberg.offsets`). A new query starts,
  as Iceberg's Spark source does, at the oldest ancestor of the current snapshot (every append
  in the table's history), or at ``startingSnapshotId`` (inclusive), or at the oldest ancestor
  committed at or after ``startingTimestamp``. ``replace`` snapshots (compaction) are skipped;
  ``delete`` and ``overwrite`` snapshots fail the stream naming the snapshot unless
  ``skipDeleteSnapshots`` / ``skipOverwriteSnapshots`` (Iceberg's
  ``streaming-skip-delete-snapshots`` / ``streaming-skip-overwrite-snapshots``).

Enumerators run on the driver (catalog, metadata and manifests through pyiceberg); readers run
on executors (:mod:`sparklink.iceberg.reader`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone

from pyspark.sql.types import StructType

from sparklink.errors import ConfigError, DataError
from sparklink.iceberg.config import (
    BRANCH_PARSER,
    MAIN_BRANCH,
    IcebergTableConfig,
    IcebergTableOptions,
    table_and_catalog,
)
from sparklink.iceberg.offsets import NO_SNAPSHOT, NOT_ENTERED, START, IcebergOffset
from sparklink.iceberg.reader import IcebergReader
from sparklink.iceberg.scan import AddedFiles, DataFileRef, added_files, ancestry, check_format, head, live_data_files
from sparklink.iceberg.spark_schema import spark_schema_of
from sparklink.options import BOOL, Applies, Option, Options, custom, integer
from sparklink.source import READ_ALL, Boundedness, Offset, ReadLimit, Source, Split, SplitEnumerator
from sparklink.source.packing import pack

_READ = Applies("mode", ("read",), "applies to spark.read only (a stream starts at startingSnapshotId / "
                "startingTimestamp)", "`spark.read`")
_STREAM = Applies("mode", ("stream",), "applies to spark.readStream only", "`spark.readStream`")
_TIME = custom(lambda key, value: parse_timestamp_ms(key, value),
               "milliseconds since the epoch, or ISO-8601 (`2026-11-25T10:00:00Z`; UTC when no zone is given)")


class IcebergSourceOptions(IcebergTableOptions):
    """``sparklink.iceberg`` as a source (``spark.read`` and ``spark.readStream``)."""

    snapshot_id = Option("snapshotId", integer(), applies=_READ, default_doc="the current snapshot",
                         doc="read this snapshot (time travel)")
    as_of_timestamp = Option("asOfTimestamp", _TIME, applies=_READ, doc="read the snapshot that was current at this "
                             "time")
    starting_snapshot_id = Option("startingSnapshotId", integer(), applies=_STREAM, default_doc="the oldest ancestor",
                                  doc="a new query starts with the files this snapshot adds (inclusive); it must be "
                                      "an ancestor of the current snapshot")
    starting_timestamp = Option("startingTimestamp", _TIME, applies=_STREAM,
                                doc="a new query starts at the oldest ancestor committed at or after this time; when "
                                    "none is yet, with the first snapshot that comes")
    max_files = Option("maxFilesPerTrigger", integer(1), applies=_STREAM, default_doc="no limit",
                       doc="at most this many data files per micro-batch (at least one)")
    skip_delete = Option("skipDeleteSnapshots", BOOL, default=False, applies=_STREAM,
                         doc="skip `delete` snapshots instead of failing")
    skip_overwrite = Option("skipOverwriteSnapshots", BOOL, default=False, applies=_STREAM,
                            doc="skip `overwrite` snapshots (the files they add too) instead of failing")
    branch = Option("branch", BRANCH_PARSER, default=MAIN_BRANCH,
                    doc="read this branch: its head for `spark.read`, its ancestry for a stream (a missing branch is "
                        "refused; not together with `snapshotId` / `asOfTimestamp`)")


O = IcebergSourceOptions


def parse_timestamp_ms(option: str, value: str) -> int:
    """Milliseconds since the epoch, or an ISO-8601 time (UTC when it names no zone)."""
    text = value.strip()
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ConfigError(option, f"'{value}' is not a time", "milliseconds since the epoch or ISO-8601, "
                          "e.g. 2026-11-25T10:00:00Z") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return int(moment.timestamp() * 1000)


@dataclass(frozen=True, kw_only=True)
class IcebergSourceConfig(IcebergTableConfig):
    """The table, its catalog, and the source's options (``given`` keeps which were set)."""

    snapshot_id: int | None = None
    as_of_timestamp: int | None = None
    starting_snapshot_id: int | None = None
    starting_timestamp: int | None = None
    max_files: int | None = None
    skip_delete: bool = False
    skip_overwrite: bool = False
    given: tuple[str, ...] = ()

    @classmethod
    def from_options(cls, raw: Mapping[str, str]) -> "IcebergSourceConfig":
        options = Options(raw)
        if "path" in options:  # .load("...") sets it
            raise ConfigError("path", f"sparklink.iceberg reads the table named by the 'table' option, not a path "
                              f"(got '{options['path']}')", "e.g. .option('table', 'db.events').load()")
        O.options(options)
        namespace, name, catalog_name, properties = table_and_catalog(options)
        given = tuple(spec.key for spec in O.specs() if spec.applies is not None and spec.given(options)) + \
            ((O.branch.key,) if O.branch.given(options) else ())
        if O.snapshot_id.given(options) and O.as_of_timestamp.given(options):
            raise ConfigError(O.as_of_timestamp.key, f"cannot be given together with {O.snapshot_id}")
        if O.branch.given(options) and (O.snapshot_id.given(options) or O.as_of_timestamp.given(options)):
            raise ConfigError(O.branch.key, f"cannot be given together with {O.snapshot_id} / "
                              f"{O.as_of_timestamp} (a snapshot is on no branch in particular)")
        if O.starting_snapshot_id.given(options) and O.starting_timestamp.given(options):
            raise ConfigError(O.starting_timestamp.key, f"cannot be given together with {O.starting_snapshot_id}")
        return cls(
            namespace=namespace, name=name, catalog_name=catalog_name, catalog_properties=properties,
            branch=O.branch.value(options),
            snapshot_id=O.snapshot_id.get(options),
            as_of_timestamp=O.as_of_timestamp.get(options),
            starting_snapshot_id=O.starting_snapshot_id.get(options),
            starting_timestamp=O.starting_timestamp.get(options),
            max_files=O.max_files.get(options),
            skip_delete=O.skip_delete.value(options),
            skip_overwrite=O.skip_overwrite.value(options),
            given=given)

    def load_table(self):
        """The table (driver side: the planning process; its FileIO reads metadata and manifests
        only, :mod:`sparklink.iceberg.planning_io`); an absent one is a ConfigError naming it."""
        from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

        from sparklink.iceberg.planning_io import for_planning

        try:
            table = for_planning(self.load_catalog()).load_table(self.identifier)
        except (NoSuchTableError, NoSuchNamespaceError):
            raise ConfigError("table", f"no Iceberg table '{self.table_name}' in catalog "
                              f"'{self.catalog_name}'") from None
        check_format(table.metadata, self.table_name)
        head(table.metadata, self.branch, self.table_name)  # a missing branch is refused at start
        return table


def _split(kind: str, snapshot_id: int, position: int, ref: DataFileRef, metadata_location: str) -> Split:
    return Split(split_id=f"{kind}{snapshot_id}-{position}",
                 state={"metadata": metadata_location, "manifest": ref.manifest, "spec": ref.spec_id,
                        "entry": ref.entry, "path": ref.path, "rows": ref.rows, "size": ref.size,
                        "deletes": list(ref.deletes),
                        "equality": [delete.to_json() for delete in ref.equality]})


class IcebergEnumerator(SplitEnumerator):
    """Driver side. Keeps the added files of snapshots it has listed (immutable; a cache only)."""

    def __init__(self, source: "IcebergSource", *, streaming: bool):
        self.source = source
        self.config = source.config
        self.streaming = streaming
        self._added: dict[int, AddedFiles] = {}

    # -- shared -------------------------------------------------------------------------------

    def _table(self):
        return self.config.load_table()

    def _added_files(self, table, snapshot) -> list[DataFileRef]:
        return self._added_to(table, snapshot).data

    def _added_to(self, table, snapshot) -> AddedFiles:
        if snapshot.snapshot_id not in self._added:
            self._added[snapshot.snapshot_id] = added_files(table.io, snapshot)
        return self._added[snapshot.snapshot_id]

    def _readable(self, snapshot) -> bool:
        """Whether the stream reads ``snapshot``'s added files; False: skipped; an error when the
        stream cannot follow it."""
        operation = snapshot.summary.operation.value if snapshot.summary is not None else None
        if operation == "append":
            return True
        if operation == "replace":
            return False  # a rewrite (compaction): the same rows, already read
        if operation == "delete":
            if self.config.skip_delete:
                return False
            raise DataError(f"Iceberg table {self.config.table_name}: snapshot {snapshot.snapshot_id} is a delete "
                            f"snapshot, which an append stream cannot follow; set {O.skip_delete.key}=true to skip "
                            "delete snapshots")
        if operation == "overwrite":
            if self.config.skip_overwrite:
                return False
            raise DataError(f"Iceberg table {self.config.table_name}: snapshot {snapshot.snapshot_id} is an overwrite "
                            f"snapshot, which an append stream cannot follow; set {O.skip_overwrite.key}=true to "
                            "skip overwrite snapshots (their added files too)")
        raise DataError(f"Iceberg table {self.config.table_name}: snapshot {snapshot.snapshot_id} has operation "
                        f"{operation!r}, which the sparklink.iceberg source does not know")

    def _index(self, chain: list, snapshot_id: int, what: str) -> int:
        for index, snapshot in enumerate(chain):
            if snapshot.snapshot_id == snapshot_id:
                return index
        raise DataError(f"Iceberg table {self.config.table_name}: {what} snapshot {snapshot_id} is not an ancestor of "
                        f"the head of branch '{self.config.branch}' (expired, or the branch was rolled back); restart "
                        f"the stream with a new checkpoint and {O.starting_snapshot_id.key}")

    # -- offsets ------------------------------------------------------------------------------

    def initial_offset(self) -> Offset:
        if not self.streaming:
            return START.to_json()
        table = self._table()
        config = self.config
        chain = ancestry(table.metadata, config.branch, config.table_name)
        if config.starting_snapshot_id is not None:
            if table.metadata.snapshot_by_id(config.starting_snapshot_id) is None:
                raise ConfigError(O.starting_snapshot_id.key, f"table {config.table_name} has no snapshot "
                                  f"{config.starting_snapshot_id}")
            if all(s.snapshot_id != config.starting_snapshot_id for s in chain):
                raise ConfigError(O.starting_snapshot_id.key, f"snapshot {config.starting_snapshot_id} is not an "
                                  f"ancestor of the head of branch '{config.branch}' of {config.table_name}")
            return IcebergOffset(snapshot_id=config.starting_snapshot_id, position=NOT_ENTERED).to_json()
        if not chain:
            return START.to_json()
        if config.starting_timestamp is not None:
            for snapshot in chain:
                if snapshot.timestamp_ms >= config.starting_timestamp:
                    return IcebergOffset(snapshot_id=snapshot.snapshot_id, position=NOT_ENTERED).to_json()
            # nothing committed at or after the time yet: everything from now on
            last = chain[-1]
            return IcebergOffset(snapshot_id=last.snapshot_id,
                                 position=len(self._added_files(table, last))).to_json()
        return IcebergOffset(snapshot_id=chain[0].snapshot_id, position=NOT_ENTERED).to_json()

    def available_now_offset(self, start: Offset | None) -> Offset:
        table = self._table()
        current = head(table.metadata, self.config.branch, self.config.table_name)
        if current is None:
            return START.to_json()
        return IcebergOffset(snapshot_id=current.snapshot_id, position=len(self._added_files(table, current))).to_json()

    def _walk(self, table, start: IcebergOffset, end: IcebergOffset | None, limit: ReadLimit):
        """Admit files from ``start`` on, up to ``end`` (None: the current snapshot's last file) and
        within ``limit``; yield ``(snapshot, position, ref)`` per admitted file and return the
        offset reached (the generator's return value). A snapshot the stream cannot follow ends
        the walk before it; it fails the stream once nothing comes before it."""
        chain = ancestry(table.metadata, self.config.branch, self.config.table_name)
        if not chain:
            return start
        if start.before_any_snapshot:
            index, position = 0, NOT_ENTERED
        else:
            index, position = self._index(chain, start.snapshot_id, "the stream's last read"), start.position
        if end is None:
            last_index, last_position = len(chain) - 1, None
        elif end.before_any_snapshot:
            return start
        else:
            last_index, last_position = self._index(chain, end.snapshot_id, "the micro-batch's end"), end.position
        if last_index < index:
            return start
        admitted = 0
        reached = start
        while True:
            snapshot = chain[index]
            refs = self._added_files(table, snapshot)
            if position == NOT_ENTERED:
                try:
                    readable = self._readable(snapshot)
                    if readable:  # an append adding delete files (a skipped snapshot may add them)
                        self._added_to(table, snapshot).check_no_deletes(snapshot.snapshot_id, self.config.table_name)
                except DataError:
                    if reached != start:
                        return reached  # deliver what comes before it; the next trigger fails
                    raise
                position = 0 if readable else len(refs)
            stop = len(refs) if index < last_index or last_position is None else max(last_position, position)
            while position < min(stop, len(refs)):
                if admitted and limit.max_files is not None and admitted >= limit.max_files:
                    return IcebergOffset(snapshot_id=snapshot.snapshot_id, position=position)
                yield snapshot, position, refs[position]
                admitted += 1
                position += 1
            reached = IcebergOffset(snapshot_id=snapshot.snapshot_id, position=position)
            if index >= last_index:
                return reached
            if limit.max_files is not None and admitted >= limit.max_files:
                return reached
            index, position = index + 1, NOT_ENTERED

    def latest_offset(self, start: Offset, limit: ReadLimit) -> Offset:
        if not self.streaming:
            return {**START.to_json(), "snapshot": self._batch_snapshot_id()}
        table = self._table()
        until = IcebergOffset.from_json(limit.until) if limit.until is not None else None
        walk = self._walk(table, IcebergOffset.from_json(start), until, limit)
        while True:
            try:
                next(walk)
            except StopIteration as done:
                return done.value.to_json()

    def plan_splits(self, start: Offset, end: Offset) -> list[Split]:
        table = self._table()
        location = table.metadata_location
        if not self.streaming:
            snapshot_id = end["snapshot"]
            if snapshot_id == NO_SNAPSHOT:
                return []
            snapshot = table.metadata.snapshot_by_id(snapshot_id)
            refs = live_data_files(table.io, snapshot, table.metadata, self.config.table_name)
            return [_split("b", snapshot_id, n, ref, location) for n, ref in enumerate(refs)]
        walk = self._walk(table, IcebergOffset.from_json(start), IcebergOffset.from_json(end), READ_ALL)
        return [_split("s", snapshot.snapshot_id, position, ref, location) for snapshot, position, ref in walk]

    def group_splits(self, splits: list[Split]) -> list[list[Split]]:
        """Small data files are read several to a task (a split per file stays the unit offsets
        count), as Spark's Iceberg source packs them (``read.split.target-size``)."""
        return pack(splits, lambda split: split.state["size"])

    def supported_limits(self) -> frozenset[str]:
        return frozenset({"max_files"})

    # -- batch reads --------------------------------------------------------------------------

    def _batch_snapshot_id(self) -> int:
        table = self._table()
        config = self.config
        if config.snapshot_id is not None:
            if table.metadata.snapshot_by_id(config.snapshot_id) is None:
                raise ConfigError(O.snapshot_id.key, f"table {config.table_name} has no snapshot {config.snapshot_id}")
            return config.snapshot_id
        if config.as_of_timestamp is not None:
            snapshot = table.snapshot_as_of_timestamp(config.as_of_timestamp)
            if snapshot is None:
                raise ConfigError(O.as_of_timestamp.key, f"table {config.table_name} has no snapshot at or before "
                                  f"{config.as_of_timestamp} ms")
            return snapshot.snapshot_id
        current = head(table.metadata, config.branch, config.table_name)
        return current.snapshot_id if current is not None else NO_SNAPSHOT


class IcebergSource(Source):
    """Validates the options and reads the table's schema on the driver; pickled to executors
    with the catalog's properties (the readers open the same FileIO) and the schema only."""

    def __init__(self, options: Mapping[str, str] | None = None):
        super().__init__(options)
        self.config = IcebergSourceConfig.from_options(self.options)
        table = self.config.load_table()
        schema = table.schema()
        if self.config.snapshot_id is not None or self.config.as_of_timestamp is not None:
            snapshot_id = IcebergEnumerator(self, streaming=False)._batch_snapshot_id()
            schema_id = table.metadata.snapshot_by_id(snapshot_id).schema_id
            if schema_id is not None:
                schema = table.schemas()[schema_id]
        self.iceberg_schema_json = schema.model_dump_json()
        self.spark_schema = spark_schema_of(schema, self.config.table_name)

    @property
    def boundedness(self) -> Boundedness:
        return Boundedness.CONTINUOUS_UNBOUNDED

    def schema(self) -> StructType:
        return self.spark_schema

    def create_enumerator(self, *, streaming: bool) -> IcebergEnumerator:
        O.check_applies(Options({key: "" for key in self.config.given}), "mode", "stream" if streaming else "read")
        return IcebergEnumerator(self, streaming=streaming)

    def create_reader(self, schema: StructType) -> IcebergReader:
        from pyspark.sql.pandas.types import to_arrow_schema

        # Spark takes record batches of the schema in UTC (pyspark.sql.worker.plan_data_source_read)
        return IcebergReader(self.iceberg_schema_json, to_arrow_schema(schema, timezone="UTC"),
                             dict(self.config.catalog_properties))

    def default_read_limit(self) -> ReadLimit:
        return ReadLimit(max_files=self.config.max_files) if self.config.max_files is not None else READ_ALL
