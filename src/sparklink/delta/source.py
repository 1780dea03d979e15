"""The ``sparklink.delta`` source (FLIP-27 shape): splits are the data files a table version adds.

* ``spark.read``: the files of one snapshot (the latest, or ``versionAsOf``), listed by delta-rs;
  with ``readChangeFeed`` the changes of versions ``startingVersion`` (or the first committed at or
  after ``startingTimestamp``) to ``endingVersion`` (or the last committed at or before
  ``endingTimestamp``; default the latest), planned version by version as a stream plans them.
* ``spark.readStream``, as Spark's Delta source: without a starting option, the snapshot of the
  latest version at the query's start first (its files ordered by modification time and path),
  then the files each later version adds; with ``startingVersion`` (or ``startingTimestamp``: the
  first version committed at or after it) the files each version adds from there, no snapshot.
  The offset in Spark's checkpoint is ``{"version": v, "index": i}``: the next file to read is add
  action ``i`` of version ``v`` (the order of the version's commit file, so a replay plans the
  same splits), or ``{"version": s, "index": i, "snapshot": true}``: file ``i`` of the snapshot
  of version ``s``.
  ``maxFilesPerTrigger`` (default 1000, Delta's) / ``maxBytesPerTrigger`` bound a micro-batch;
  availableNow is served by the SDK.

A version that removes data (``remove`` with ``dataChange``: a delete, update, merge, overwrite)
fails the stream naming the version unless ``skipChangeCommits`` (then the whole version is skipped,
its adds too, as Delta's source) or ``readChangeFeed`` (then the stream reads the table's change
data feed: a version's ``cdc`` files, or its adds as inserts and removes as deletes, with
``_change_type``, ``_commit_version``, ``_commit_timestamp``). Deletion vectors are decoded by
delta-rs (``DeltaTable.deletion_vectors``) on the driver; a split carries the ranges of row
positions its file's vector deletes. Other reader features (column mapping, ...) are refused
naming the feature; a version whose schema differs from the stream's fails naming the version.

Enumerators run on the driver and read the table's commit files (``_delta_log/<v>.json``); readers
run on executors and read one Parquet data file each with pyarrow.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from urllib.parse import unquote

import pyarrow as pa
from deltalake import DeltaTable
from deltalake.exceptions import DeltaError, TableNotFoundError
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema
from pyspark.sql.types import StructType

from sparklink.arrow_arrays import repeated
from sparklink.delta.partition_values import partition_column, partition_value_text
from sparklink.delta.table_location import DeltaTableOptions, TableLocation, add_actions, from_delta_rs
from sparklink.errors import ConfigError, DataError
from sparklink.options import BOOL, SIZE, Applies, Option, custom, integer
from sparklink.source import (
    Boundedness,
    Offset,
    ReadLimit,
    Source,
    SourceReader,
    Split,
    SplitEnumerator,
)
from sparklink.source.packing import pack

DEFAULT_MAX_FILES = 1000
_READ = Applies("mode", ("read",), "applies to spark.read; a stream starts at startingVersion / startingTimestamp, "
                "or with the latest snapshot", "`spark.read`")
_STREAM = Applies("mode", ("stream",), "applies to spark.readStream", "`spark.readStream`")
# "changes": spark.read with readChangeFeed=true (a bounded range of versions' changes)
_START = Applies("mode", ("stream", "changes"), "applies to spark.readStream, and to spark.read with "
                 "readChangeFeed=true; a spark.read without it reads one snapshot (versionAsOf)",
                 "`spark.readStream`; `spark.read` with `readChangeFeed`")
_CHANGES = Applies("mode", ("changes",), "applies to spark.read with readChangeFeed=true (a stream has no end)",
                   "`spark.read` with `readChangeFeed`")


class DeltaSourceOptions(DeltaTableOptions):
    """``sparklink.delta`` as a source (``spark.read`` and ``spark.readStream``). Of the S3
    settings, all but ``s3.allowUnconditionalWrites`` (a source writes nothing)."""

    exclude = ("s3.allowUnconditionalWrites",)
    version_as_of = Option("versionAsOf", integer(0), applies=_READ, default_doc="latest",
                           doc="the snapshot of this version (refused for streams and with `readChangeFeed`)")
    starting_version = Option("startingVersion", integer(0), applies=_START,
                              doc="the first version whose added files are read (no snapshot); `0` reads every "
                                  "append of the table's history in order. With `readChangeFeed`: the first version "
                                  "whose changes are read (a `spark.read` of changes needs it or `startingTimestamp`)")
    starting_timestamp = Option("startingTimestamp", custom(lambda key, value: parse_timestamp(key, value),
                                                            "ISO 8601 date or date-time"), applies=_START,
                                doc="start at the first version committed at or after this time (UTC unless it names "
                                    "a zone); a time before the first commit starts at the earliest version in the "
                                    "log, one after the latest commit is refused. Exclusive with `startingVersion`")
    ending_version = Option("endingVersion", integer(0), applies=_CHANGES, default_doc="latest",
                            doc="the last version whose changes are read (inclusive); one before the starting "
                                "version is refused, one past the latest reads up to the latest (as Delta's)")
    ending_timestamp = Option("endingTimestamp", custom(lambda key, value: parse_timestamp(key, value),
                                                        "ISO 8601 date or date-time"), applies=_CHANGES,
                              default_doc="latest",
                              doc="end at the last version committed at or before this time (UTC unless it names a "
                                  "zone); a time before the first commit or after the latest is refused (as Delta's). "
                                  "Exclusive with `endingVersion`")
    max_files = Option("maxFilesPerTrigger", integer(1), default=DEFAULT_MAX_FILES, applies=_STREAM,
                       doc="data files per micro-batch (at least one)")
    max_bytes = Option("maxBytesPerTrigger", SIZE, applies=_STREAM,
                       doc="bytes of data files per micro-batch (at least one file)")
    skip_change_commits = Option("skipChangeCommits", BOOL, default=False, applies=_STREAM,
                                 doc="skip versions that remove data (delete, update, overwrite) whole; otherwise "
                                     "such a version fails the stream with an error naming it")
    read_change_feed = Option("readChangeFeed", BOOL, default=False,
                              doc="read the table's change data feed (`spark.readStream`, and `spark.read` from "
                                  "`startingVersion` / `startingTimestamp`): each row with `_change_type` (`insert`, "
                                  "`update_preimage`, `update_postimage`, `delete`), `_commit_version` and "
                                  "`_commit_timestamp`; versions that update or delete (merges) are read, never "
                                  "refused; needs the table property `delta.enableChangeDataFeed = true`")


O = DeltaSourceOptions

SERVED_READER_FEATURES: frozenset[str] = frozenset({"timestampNtz", "deletionVectors"})
CDF_PROPERTY = "delta.enableChangeDataFeed"
CHANGE_TYPE, COMMIT_VERSION, COMMIT_TIMESTAMP = "_change_type", "_commit_version", "_commit_timestamp"
CDF_FIELDS = (pa.field(CHANGE_TYPE, pa.string()), pa.field(COMMIT_VERSION, pa.int64()),
              pa.field(COMMIT_TIMESTAMP, pa.timestamp("us", tz="UTC")))
SPLIT_KEYS = ("path", "size", "partitionValues", "deleted", "changeType", "version", "timestamp")


def check_protocol(table: DeltaTable, root: str) -> None:
    """Refuse a table whose readers need a feature this source does not serve."""
    protocol = table.protocol()
    if protocol.min_reader_version == 2:
        raise DataError(f"Delta table {root}: reader version 2 (column mapping) is not served by sparklink.delta")
    if protocol.min_reader_version > 3:
        raise DataError(f"Delta table {root}: reader version {protocol.min_reader_version} is not served")
    unserved = sorted(set(protocol.reader_features or ()) - SERVED_READER_FEATURES)
    if unserved:
        raise DataError(f"Delta table {root} needs reader features {', '.join(unserved)}, not served by "
                        f"sparklink.delta (served: {', '.join(sorted(SERVED_READER_FEATURES))})")


def open_table(table: TableLocation, version: int | None = None) -> DeltaTable:
    """The table's latest snapshot, or ``version``'s (``versionAsOf``): a version past the latest
    is refused naming the option and the latest version."""
    try:
        return DeltaTable(table.uri(), version=version, storage_options=table.delta_storage_options())
    except TableNotFoundError:
        raise ConfigError(O.path.key, f"no Delta table at {table.uri()}") from None
    except DeltaError:
        if version is None:
            raise
        latest = open_table(table).version()
        if version > latest:
            raise ConfigError(O.version_as_of.key, f"version {version} of {table.uri()} does not exist: the table's "
                              f"latest version is {latest}", f"0 to {latest}") from None
        raise


def commit_key(version: int) -> str:
    return f"_delta_log/{version:020d}.json"


def version_actions(table: TableLocation, version: int) -> list[dict]:
    """The actions of one commit, in file order (driver side)."""
    data = table.read_bytes(commit_key(version))
    if data is None:
        raise DataError(f"Delta table {table.uri()}: the commit file of version {version} is gone (log clean-up); "
                        f"start from a later {O.starting_version.key}")
    return [json.loads(line) for line in data.decode().splitlines() if line.strip()]


def _key(offset: Offset) -> tuple[int, int, int]:
    """Order of positions: the snapshot of version ``s`` comes before the changes of ``s + 1``."""
    return offset["version"], 0 if offset.get("snapshot") else 1, offset["index"]


def _offset(version: int, index: int, snapshot: bool) -> Offset:
    """An offset; ``snapshot`` only where true (change offsets keep the format of 1.0)."""
    return {"version": version, "index": index, "snapshot": True} if snapshot else {"version": version, "index": index}


def commit_times(table: TableLocation, latest: int) -> list[tuple[int, float]]:
    """(version, commit time in epoch seconds) of every commit file still in the log, in version
    order: the commit's in-commit timestamp where it has one (tables with
    ``delta.enableInCommitTimestamps``), else the file's modification time, made strictly
    increasing (a version's time is at least the previous one's plus 1 ms), as Spark's Delta
    reads commit times."""
    times, previous = [], None
    for version in range(latest + 1):
        mtime = table.modified_at(commit_key(version))
        data = table.read_bytes(commit_key(version)) if mtime is not None else None
        if mtime is None or data is None:
            continue  # removed by log clean-up
        first = json.loads(data.split(b"\n", 1)[0] or b"{}")
        in_commit = first.get("commitInfo", {}).get("inCommitTimestamp") if isinstance(first, dict) else None
        if isinstance(in_commit, int):
            mtime = in_commit / 1000
        if previous is not None and mtime <= previous:
            mtime = previous + 0.001
        times.append((version, mtime))
        previous = mtime
    return times


def commit_time(table: TableLocation, version: int) -> float:
    """One version's commit time in epoch seconds: its in-commit timestamp, else its commit
    file's modification time (:func:`commit_times` without the ordering of neighbours)."""
    data = table.read_bytes(commit_key(version))
    mtime = table.modified_at(commit_key(version))
    if data is None or mtime is None:
        raise DataError(f"Delta table {table.uri()}: the commit file of version {version} is gone (log clean-up)")
    first = json.loads(data.split(b"\n", 1)[0] or b"{}")
    in_commit = first.get("commitInfo", {}).get("inCommitTimestamp") if isinstance(first, dict) else None
    return in_commit / 1000 if isinstance(in_commit, int) else mtime


def parse_timestamp(option: str, value: str) -> datetime:
    """An ISO 8601 date or date-time; without a zone it is UTC."""
    try:
        moment = datetime.fromisoformat(value.strip())
    except ValueError:
        raise ConfigError(option, f"'{value}' is not a date or timestamp",
                          "ISO 8601, e.g. 2026-01-31 or 2026-01-31T12:00:00 (UTC) or 2026-01-31T12:00:00+02:00") from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _committed(times: list[tuple[int, float]], index: int) -> str:
    return datetime.fromtimestamp(times[index][1], UTC).isoformat() if times else "none"


def version_at_or_after(table: TableLocation, latest: int, moment: datetime,
                        times: list[tuple[int, float]] | None = None) -> int:
    """The first version committed at or after ``moment`` (Spark's Delta ``startingTimestamp``);
    a moment after the latest commit is refused, as Spark's Delta refuses it. ``times``: the
    table's :func:`commit_times`, when the caller has read them."""
    wanted = moment.timestamp()
    times = times if times is not None else commit_times(table, latest)
    for version, committed in times:
        if committed >= wanted:
            return version
    raise ConfigError(O.starting_timestamp.key, f"{moment.isoformat()} is after the latest commit of {table.uri()} "
                      f"(version {latest}, committed {_committed(times, -1)})", "a time at or before the latest commit")


def version_at_or_before(table: TableLocation, latest: int, moment: datetime,
                         times: list[tuple[int, float]] | None = None) -> int:
    """The last version committed at or before ``moment`` (Spark's Delta ``endingTimestamp`` of a
    change feed read); a moment before the first commit still in the log or after the latest
    commit is refused, as Spark's Delta refuses them (its default)."""
    wanted = moment.timestamp()
    times = times if times is not None else commit_times(table, latest)
    accepted = "a time from the first to the latest commit"
    if not times or wanted < times[0][1]:
        first = times[0][0] if times else latest
        raise ConfigError(O.ending_timestamp.key, f"{moment.isoformat()} is before the first commit of {table.uri()} "
                          f"(version {first}, committed {_committed(times, 0)})", accepted)
    if wanted > times[-1][1]:
        raise ConfigError(O.ending_timestamp.key, f"{moment.isoformat()} is after the latest commit of {table.uri()} "
                          f"(version {latest}, committed {_committed(times, -1)})", accepted)
    return [version for version, committed in times if committed <= wanted][-1]


class DeltaEnumerator(SplitEnumerator):
    """Driver side: admits the files of the initial snapshot (when the stream starts with one),
    then the added files of version after version. A batch read of changes (``readChangeFeed``
    in ``spark.read``) walks its range of versions as a stream walks them, in one step."""

    def __init__(self, source: DeltaSource, *, streaming: bool):
        self.source = source
        self.streaming = streaming
        self.batch_changes = not streaming and source.read_change_feed
        self._snapshots: dict[int, list[dict]] = {}
        self._times: dict[int, int] = {}
        self._range: tuple[int, int] | None = None

    def _latest_version(self) -> int:
        return open_table(self.source.table).version()

    def _first_version(self, latest: int, times: list[tuple[int, float]] | None = None) -> int | None:
        """``startingVersion``, or the first version committed at or after ``startingTimestamp``
        (None: neither given). A version past the latest is refused naming the latest; with
        ``readChangeFeed`` so is a version whose table has no change data feed (as Spark's Delta)."""
        if self.source.starting_version is not None:
            first = self.source.starting_version
            if first > latest:
                raise ConfigError(O.starting_version.key, f"version {first} of {self.source.root} does not exist "
                                  f"yet: the table's latest version is {latest}", f"0 to {latest}")
        elif self.source.starting_timestamp is not None:
            first = version_at_or_after(self.source.table, latest, self.source.starting_timestamp, times)
        else:
            return None
        if self.source.read_change_feed and first < latest:  # the latest is checked when the source is made
            configuration = open_table(self.source.table, first).metadata().configuration
            if configuration.get(CDF_PROPERTY, "false").lower() != "true":
                option = O.starting_version if self.source.starting_version is not None else O.starting_timestamp
                raise ConfigError(option.key, f"the Delta table {self.source.root} has no change data feed at version "
                                  f"{first} ({CDF_PROPERTY} is not true there)",
                                  "a version at or after the one that turned it on")
        return first

    def change_range(self) -> tuple[int, int]:
        """``spark.read`` with ``readChangeFeed``: the versions ``(first, last)`` whose changes are
        read (``last = first - 1``: none, when both bounds are times between the same two commits),
        refused as Spark's Delta refuses them: no start, an end before the start."""
        if self._range is not None:
            return self._range
        source, latest = self.source, self._latest_version()
        by_time = source.starting_timestamp is not None or source.ending_timestamp is not None
        times = commit_times(source.table, latest) if by_time else None
        first = self._first_version(latest, times)
        if first is None:
            raise ConfigError(O.starting_version.key, f"spark.read with {O.read_change_feed.key}=true needs the first "
                              f"version to read: set {O.starting_version.key} or {O.starting_timestamp.key}",
                              f"0 to {latest}")
        if source.ending_version is not None:
            if source.ending_version < first:
                raise ConfigError(O.ending_version.key, f"version {source.ending_version} is before the starting "
                                  f"version {first}", f"{first} to {latest}")
            last = min(source.ending_version, latest)
        elif source.ending_timestamp is not None:
            last = version_at_or_before(source.table, latest, source.ending_timestamp, times)
            if last < first:
                start = source.starting_timestamp
                if not (start is not None and start <= source.ending_timestamp and last == first - 1):
                    raise ConfigError(O.ending_timestamp.key, f"{source.ending_timestamp.isoformat()} (version "
                                      f"{last}) is before the starting version {first}",
                                      f"a time at or after version {first}'s commit")
        else:
            last = latest
        self._range = (first, last)
        return self._range

    def initial_offset(self) -> Offset:
        if self.batch_changes:
            return _offset(self.change_range()[0], 0, False)
        if not self.streaming:
            return {"version": -1, "index": 0}
        latest = self._latest_version()
        first = self._first_version(latest)
        if first is not None:
            return _offset(first, 0, False)
        # neither: the snapshot of the latest version first, then the versions after it (Spark's Delta)
        return _offset(latest, 0, True)

    def _snapshot(self, version: int) -> list[dict]:
        """The data files of version ``version``'s snapshot, ordered as Spark's Delta orders an
        initial snapshot (modification time, then path); with ``readChangeFeed`` each is read as
        inserts of that version (as Spark's Delta source starts a change feed)."""
        if version not in self._snapshots:
            files = snapshot_files(self.source.table, version)
            if self.source.read_change_feed:
                stamp = self._commit_time(version)
                files = [dict(f, changeType="insert", version=version, timestamp=stamp) for f in files]
            self._snapshots[version] = files
        return self._snapshots[version]

    def _commit_time(self, version: int) -> int:
        """The commit time of ``version`` in epoch microseconds, as :func:`commit_times` reads it."""
        if version not in self._times:
            self._times[version] = int(round(commit_time(self.source.table, version) * 1_000_000))
        return self._times[version]

    def _deleted(self, version: int, path: str) -> list[list[int]]:
        """The rows of ``path`` the deletion vector of its add action in ``version`` removes."""
        return deleted_rows(open_table(self.source.table, version)).get(path, [])

    def _adds(self, version: int) -> list[dict]:
        """Version ``version``'s added data files; [] when skipped; an error for a data change
        the stream cannot follow. With ``readChangeFeed``: the version's changes
        (:meth:`_changes`)."""
        actions = version_actions(self.source.table, version)
        self._check_metadata(version, actions)
        if self.source.read_change_feed:
            return self._changes(version, actions)
        adds, removes = [], 0
        for action in actions:
            if "add" in action and action["add"].get("dataChange", True):
                adds.append(action["add"])
            elif "remove" in action and action["remove"].get("dataChange", True):
                removes += 1
        if removes:
            if not self.source.skip_change_commits:
                raise DataError(f"Delta table {self.source.root} version {version} removes data ({removes} files: a "
                                f"delete, update or overwrite); set {O.skip_change_commits.key}=true to skip such "
                                f"versions, or read its changes with {O.read_change_feed.key}=true")
            return []
        files = []
        for add in adds:
            file = {"path": unquote(add["path"]), "partitionValues": add["partitionValues"], "size": add["size"]}
            if add.get("deletionVector"):
                file["deleted"] = self._deleted(version, file["path"])
            files.append(file)
        return files

    def _check_metadata(self, version: int, actions: list[dict]) -> None:
        for action in actions:
            if "metaData" in action:
                schema = json.loads(action["metaData"]["schemaString"])
                names = [f["name"] for f in schema["fields"]]
                if names != self.source.table_names:
                    way_out = ("restart it with a new checkpoint" if self.streaming else
                               "read the versions before and after it apart")
                    raise DataError(f"Delta table {self.source.root} version {version} changes the schema to "
                                    f"{names}; the {'stream' if self.streaming else 'read'} reads "
                                    f"{self.source.table_names}: {way_out}")
                configuration = action["metaData"].get("configuration") or {}
                if self.source.read_change_feed and configuration.get(CDF_PROPERTY, "false").lower() != "true":
                    raise DataError(f"Delta table {self.source.root} version {version} turns the change data feed off "
                                    f"({CDF_PROPERTY} is not true): its changes cannot be read")
            elif "protocol" in action:
                check_protocol(open_table(self.source.table, version), self.source.root)

    def _changes(self, version: int, actions: list[dict]) -> list[dict]:
        """``readChangeFeed``: the files holding version ``version``'s changes, as Delta's change
        data feed defines them: its ``cdc`` files when it has any (their rows carry
        ``_change_type``: what a MERGE, UPDATE or DELETE writes), otherwise its added files as
        inserts and its removed files as deletes (appends, overwrites); compactions
        (``dataChange=false``) change nothing."""
        stamp = self._commit_time(version)
        cdc = [a["cdc"] for a in actions if "cdc" in a]
        if cdc:
            return [{"path": unquote(c["path"]), "partitionValues": c.get("partitionValues") or {}, "size": c["size"],
                     "version": version, "timestamp": stamp} for c in cdc]
        files = []
        for action in actions:
            for kind, change in (("add", "insert"), ("remove", "delete")):
                if kind in action and action[kind].get("dataChange", True):
                    entry = action[kind]
                    if entry.get("deletionVector"):
                        raise DataError(f"Delta table {self.source.root} version {version}: the change data feed of a "
                                        "version with deletion vectors and no cdc files is not served by "
                                        "sparklink.delta")
                    files.append({"path": unquote(entry["path"]), "partitionValues": entry.get("partitionValues") or {},
                                  "size": entry.get("size") or 0, "changeType": change, "version": version,
                                  "timestamp": stamp})
        return files

    def _files(self, offset: Offset) -> list[dict]:
        return self._snapshot(offset["version"]) if offset.get("snapshot") else self._adds(offset["version"])

    def _walk(self, start: Offset, stop: Offset, last: int):
        """(offset, file) from ``start`` up to (not including) ``stop`` and version ``last``."""
        version, index, snapshot = start["version"], start["index"], bool(start.get("snapshot"))
        while _key(_offset(version, index, snapshot)) < _key(stop) and version <= last:
            files = self._files(_offset(version, index, snapshot))
            while index < len(files):
                here = _offset(version, index, snapshot)
                if _key(here) >= _key(stop):
                    return
                yield here, files[index]
                index += 1
            version, index, snapshot = version + 1, 0, False

    def latest_offset(self, start: Offset, limit: ReadLimit) -> Offset:
        if self.batch_changes:
            return _offset(self.change_range()[1] + 1, 0, False)
        if not self.streaming:
            return {"version": self.source.version_as_of if self.source.version_as_of is not None
                    else self._latest_version(), "index": 0}
        last = self._latest_version()
        stop = limit.until if limit.until is not None else _offset(last + 1, 0, False)
        files = bytes_ = 0
        for here, file in self._walk(start, stop, last):
            if files and ((limit.max_files is not None and files >= limit.max_files)
                          or (limit.max_bytes is not None and bytes_ + file["size"] > limit.max_bytes)):
                return here
            files += 1
            bytes_ += file["size"]
        # everything up to the stop (or the latest version) is admitted
        end = _offset(last + 1, 0, False)
        return end if _key(end) <= _key(stop) else stop

    def available_now_offset(self, start: Offset | None) -> Offset:
        return _offset(self._latest_version() + 1, 0, False)

    def plan_splits(self, start: Offset, end: Offset) -> list[Split]:
        if not self.streaming and not self.batch_changes:
            table = open_table(self.source.table, end["version"])
            check_protocol(table, self.source.root)
            return [Split(split_id=f"s{end['version']}-{index}", state=_state(file))
                    for index, file in enumerate(snapshot_files(self.source.table, end["version"], table))]
        last = self.change_range()[1] if self.batch_changes else self._latest_version()
        return [Split(split_id=f"{'s' if here.get('snapshot') else 'v'}{here['version']}-{here['index']}",
                      state=_state(file))
                for here, file in self._walk(start, end, last)]

    def group_splits(self, splits: list[Split]) -> list[list[Split]]:
        """Small data files are read several to a task (a split per file stays the unit offsets
        count), as Spark's Delta source packs them."""
        return pack(splits, lambda split: split.state["size"])

    def supported_limits(self) -> frozenset[str]:
        return frozenset({"max_files", "max_bytes"})


def deleted_rows(table: DeltaTable) -> dict[str, list[list[int]]]:
    """The rows the deletion vectors of ``table``'s snapshot delete, per data file (relative
    path): ranges ``[start, stop)`` of row positions in the file. delta-rs decodes the vectors
    (``DeltaTable.deletion_vectors``: a selection vector per file that has one); an empty dict
    for a table without them."""
    if "deletionVectors" not in set(table.protocol().reader_features or ()):
        return {}
    root = unquote(table.table_uri.rstrip("/")) + "/"
    out: dict[str, list[list[int]]] = {}
    for row in from_delta_rs(table.deletion_vectors()).to_pylist():
        path = unquote(row["filepath"])
        relative = path[len(root):] if path.startswith(root) else path
        out[relative] = _ranges([index for index, keep in enumerate(row["selection_vector"]) if not keep])
    return out


def _ranges(positions: list[int]) -> list[list[int]]:
    ranges: list[list[int]] = []
    for position in positions:
        if ranges and ranges[-1][1] == position:
            ranges[-1][1] += 1
        else:
            ranges.append([position, position + 1])
    return ranges


def _state(file: dict) -> dict:
    """What a reader needs of a planned file."""
    return {key: file[key] for key in SPLIT_KEYS if key in file}


def snapshot_files(location: TableLocation, version: int, table: DeltaTable | None = None) -> list[dict]:
    """The data files of the table's snapshot at ``version`` (listed by delta-rs), ordered by
    modification time and path; partition values as the log spells them; ``deleted``: the
    rows a deletion vector removes from the file (ranges of row positions)."""
    table = table if table is not None else open_table(location, version)
    check_protocol(table, location.uri())
    actions = add_actions(table)
    columns = [c for c in actions.column_names if c.startswith("partition.")]
    deleted = deleted_rows(table)
    files = []
    # only the columns used: converting the statistics' zoned timestamps to Python imports pandas
    for row in actions.select(["path", "size_bytes", "modification_time", *columns]).to_pylist():
        path = unquote(row["path"])
        file = {"path": path, "size": row["size_bytes"], "mtime": row["modification_time"],
                "partitionValues": {c[len("partition."):]: partition_value_text(row[c]) for c in columns}}
        if path in deleted:
            file["deleted"] = deleted[path]
        files.append(file)
    files.sort(key=lambda f: (f["mtime"], f["path"]))
    return files


class DeltaReader(SourceReader):
    """Executor side: one data file, streamed in batches
    (:func:`sparklink.formats.parquet.file_batches`), its partition values added as typed
    columns, the rows its deletion vector removes left out (``deleted``, row positions in the
    file), and with ``readChangeFeed`` the change columns (``_change_type`` from a cdc file's own
    column, else the split's).

    The Parquet reader, numpy and Arrow's compute functions are imported here, where rows are
    read, not at the module's top: PySpark starts a fresh Python process to plan each streaming
    query, which imports this module, and those imports (``pyarrow.parquet`` pulls in
    ``pyarrow.fs`` and ``ssl``) cost it about 70 ms for nothing (executors keep their Python
    workers, so they import them once)."""

    def __init__(self, table: TableLocation, schema: pa.Schema):
        self.table = table
        self.schema = schema

    def read(self, split: Split) -> Iterator[pa.RecordBatch]:
        import numpy as np

        from sparklink.formats import parquet

        state = split.state
        deleted = state.get("deleted") or []
        position = 0  # row position in the file of the batch's first row (deletion vectors count so)
        for batch in parquet.file_batches(self.table.open_input(state["path"])):
            rows = batch.num_rows
            if deleted:
                keep = np.ones(rows, dtype=bool)
                for start, stop in deleted:
                    low, high = max(start - position, 0), min(stop - position, rows)
                    if low < high:
                        keep[low:high] = False
                batch = batch.filter(pa.array(keep))
            position += rows
            if batch.num_rows:
                yield self._typed(batch, state)

    def _typed(self, batch: pa.RecordBatch, state: dict) -> pa.RecordBatch:
        """``batch`` with the stream's columns: partition values and change columns added, types
        cast to the table's, a column missing from an older file null."""
        rows = batch.num_rows
        present = set(batch.schema.names)
        columns = []
        for field in self.schema:
            if field.name in state["partitionValues"]:
                value = state["partitionValues"][field.name]
                columns.append(partition_column(value, field.type, rows))
            elif field.name in present:
                columns.append(batch.column(field.name).cast(field.type))
            elif field.name == CHANGE_TYPE and "changeType" in state:
                columns.append(repeated(state["changeType"], field.type, rows))
            elif field.name == COMMIT_VERSION and "version" in state:
                columns.append(repeated(state["version"], field.type, rows))
            elif field.name == COMMIT_TIMESTAMP and "timestamp" in state:
                columns.append(repeated(state["timestamp"], pa.int64(), rows).cast(field.type))
            else:  # a column added later by a schema change: null in older files
                columns.append(pa.nulls(rows, field.type))
        return pa.RecordBatch.from_arrays(columns, schema=self.schema)


class DeltaSource(Source):
    """Validates options on the driver; the schema is the table's (latest, or ``versionAsOf``)."""

    def __init__(self, options: Mapping[str, str] | None = None):
        super().__init__(options)
        opts = self.opts = O.options(options)
        self.table = TableLocation.from_options(opts)
        self.root = self.table.uri()
        self.version_as_of = O.version_as_of.get(opts)
        self.starting_version = O.starting_version.get(opts)
        self.starting_timestamp = O.starting_timestamp.get(opts)
        if self.starting_version is not None and self.starting_timestamp is not None:
            raise ConfigError(O.starting_timestamp.key, f"is exclusive with {O.starting_version}", "one of them")
        self.ending_version = O.ending_version.get(opts)
        self.ending_timestamp = O.ending_timestamp.get(opts)
        if self.ending_version is not None and self.ending_timestamp is not None:
            raise ConfigError(O.ending_timestamp.key, f"is exclusive with {O.ending_version}", "one of them")
        self.max_files = O.max_files.value(opts)
        self.max_bytes = O.max_bytes.get(opts)
        self.skip_change_commits = O.skip_change_commits.value(opts)
        self.read_change_feed = O.read_change_feed.value(opts)
        if self.read_change_feed and self.version_as_of is not None:
            raise ConfigError(O.version_as_of.key, f"is exclusive with {O.read_change_feed.key} (a change feed reads "
                              f"versions {O.starting_version.key} to {O.ending_version.key})", "one of them")
        table = open_table(self.table, self.version_as_of)
        check_protocol(table, self.root)
        arrow = pa.schema(table.schema().to_arrow())
        self.table_names = arrow.names
        if self.read_change_feed:
            if self.skip_change_commits:
                raise ConfigError(O.skip_change_commits.key, f"is exclusive with {O.read_change_feed.key} (the change "
                                  "feed reads the versions it would skip)", "one of them")
            if table.metadata().configuration.get(CDF_PROPERTY, "false").lower() != "true":
                raise ConfigError(O.read_change_feed.key, f"the Delta table {self.root} has no change data feed: its "
                                  f"property {CDF_PROPERTY} is not true", f"set it first (ALTER TABLE ... SET "
                                  f"TBLPROPERTIES ({CDF_PROPERTY} = true), or delta-rs's "
                                  "alter.set_table_properties), then read changes committed after it")
            clash = [f.name for f in CDF_FIELDS if f.name in arrow.names]
            if clash:
                raise DataError(f"Delta table {self.root} has columns named {clash}, which readChangeFeed adds")
            arrow = pa.schema([*arrow, *CDF_FIELDS])
        self.spark_schema = from_arrow_schema(arrow)

    @property
    def boundedness(self) -> Boundedness:
        return Boundedness.CONTINUOUS_UNBOUNDED

    def schema(self) -> StructType:
        return self.spark_schema

    def create_enumerator(self, *, streaming: bool) -> DeltaEnumerator:
        # an option of the other kind of read is refused, never ignored
        mode = "stream" if streaming else "changes" if self.read_change_feed else "read"
        O.check_applies(self.opts, "mode", mode, shown={"stream": "spark.readStream", "read": "spark.read",
                                                        "changes": "spark.read with readChangeFeed=true"}[mode])
        return DeltaEnumerator(self, streaming=streaming)

    def create_reader(self, schema: StructType) -> DeltaReader:
        return DeltaReader(self.table, to_arrow_schema(schema, timezone="UTC"))

    def default_read_limit(self) -> ReadLimit:
        if self.max_bytes is not None:
            return ReadLimit(max_files=self.max_files, max_bytes=self.max_bytes)
        return ReadLimit(max_files=self.max_files)
