"""The ``sparklink.delta`` source (FLIP-27 shape): splits are the data files a table version adds.

* ``spark.read``: the files of one snapshot (the latest, or ``versionAsOf``), listed by delta-rs.
* ``spark.readStream``: the files each version adds, in commit order, from ``startingVersion``
  (default 0: every append in the table's history). The offset in Spark's checkpoint is
  ``{"version": v, "index": i}``: the next file to read is add action ``i`` of version ``v``
  (the order of the version's commit file, so a replay plans the same splits).
  ``maxFilesPerTrigger`` (default 1000, Delta's) / ``maxBytesPerTrigger`` bound a micro-batch;
  availableNow is served by the SDK.

A version that removes data (``remove`` with ``dataChange``: a delete, update, overwrite) fails the
stream naming the version unless ``skipChangeCommits`` (then the whole version is skipped, its
adds too, as Delta's source). Reader features this source does not serve (deletion vectors, column
mapping, ...) are refused naming the feature; a version whose schema differs from the stream's
fails naming the version.

Enumerators run on the driver and read the table's commit files (``_delta_log/<v>.json``); readers
run on executors and read one Parquet data file each with pyarrow.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from urllib.parse import unquote, urlparse

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema
from pyspark.sql.types import StructType

from sparklink.errors import ConfigError, DataError
from sparklink.options import Options, parse_bool, parse_int, parse_size
from sparklink.source import READ_ALL, Boundedness, Offset, ReadLimit, Source, SourceReader, Split, SplitEnumerator

OPTION_PATH = "path"
OPTION_VERSION_AS_OF = "versionAsOf"
OPTION_STARTING_VERSION = "startingVersion"
OPTION_MAX_FILES = "maxFilesPerTrigger"
OPTION_MAX_BYTES = "maxBytesPerTrigger"
OPTION_SKIP_CHANGE_COMMITS = "skipChangeCommits"
KNOWN_OPTIONS = (OPTION_PATH, OPTION_VERSION_AS_OF, OPTION_STARTING_VERSION, OPTION_MAX_FILES, OPTION_MAX_BYTES,
                 OPTION_SKIP_CHANGE_COMMITS)
DEFAULT_MAX_FILES = 1000
SERVED_READER_FEATURES: frozenset[str] = frozenset({"timestampNtz"})


def check_protocol(table: DeltaTable, root: Path) -> None:
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


def open_table(root: Path, version: int | None = None) -> DeltaTable:
    try:
        return DeltaTable(str(root), version=version)
    except TableNotFoundError:
        raise ConfigError(OPTION_PATH, f"no Delta table at {root}") from None


def version_actions(root: Path, version: int) -> list[dict]:
    """The actions of one commit, in file order (driver side)."""
    path = root / "_delta_log" / f"{version:020d}.json"
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise DataError(f"Delta table {root}: the commit file of version {version} is gone (log clean-up); "
                        f"restart the stream from a later {OPTION_STARTING_VERSION}") from None
    return [json.loads(line) for line in text.splitlines() if line.strip()]


class DeltaEnumerator(SplitEnumerator):
    """Driver side: admits the added files of version after version."""

    def __init__(self, source: "DeltaSource", *, streaming: bool):
        self.source = source
        self.streaming = streaming

    def _latest_version(self) -> int:
        return open_table(self.source.root).version()

    def initial_offset(self) -> Offset:
        if not self.streaming:
            return {"version": -1, "index": 0}
        return {"version": self.source.starting_version, "index": 0}

    def _adds(self, version: int) -> list[dict]:
        """Version ``version``'s added data files; [] when skipped; an error for a data change
        the stream cannot follow."""
        adds, removes = [], 0
        for action in version_actions(self.source.root, version):
            if "add" in action and action["add"].get("dataChange", True):
                if action["add"].get("deletionVector"):
                    raise DataError(f"Delta table {self.source.root} version {version}: deletion vectors are not served")
                adds.append(action["add"])
            elif "remove" in action and action["remove"].get("dataChange", True):
                removes += 1
            elif "metaData" in action:
                schema = json.loads(action["metaData"]["schemaString"])
                names = [f["name"] for f in schema["fields"]]
                if names != self.source.spark_schema.names:
                    raise DataError(f"Delta table {self.source.root} version {version} changes the schema to "
                                    f"{names}; the stream reads {self.source.spark_schema.names}: restart it with a "
                                    "new checkpoint")
            elif "protocol" in action:
                check_protocol(open_table(self.source.root, version), self.source.root)
        if removes:
            if not self.source.skip_change_commits:
                raise DataError(f"Delta table {self.source.root} version {version} removes data ({removes} files: a "
                                f"delete, update or overwrite); set {OPTION_SKIP_CHANGE_COMMITS}=true to skip such "
                                "versions")
            return []
        return adds

    def latest_offset(self, start: Offset, limit: ReadLimit) -> Offset:
        if not self.streaming:
            return {"version": self.source.version_as_of if self.source.version_as_of is not None
                    else self._latest_version(), "index": 0}
        last = self._latest_version()
        if limit.until is not None:
            last_offset = limit.until
        else:
            last_offset = {"version": last + 1, "index": 0}
        version, index = start["version"], start["index"]
        files = bytes_ = 0
        while (version, index) < (last_offset["version"], last_offset["index"]) and version <= last:
            adds = self._adds(version)
            while index < len(adds):
                if (version, index) >= (last_offset["version"], last_offset["index"]):
                    return {"version": version, "index": index}
                if files and ((limit.max_files is not None and files >= limit.max_files)
                              or (limit.max_bytes is not None and bytes_ + adds[index]["size"] > limit.max_bytes)):
                    return {"version": version, "index": index}
                files += 1
                bytes_ += adds[index]["size"]
                index += 1
            version, index = version + 1, 0
        return {"version": version, "index": index} if (version, index) <= (last_offset["version"],
                                                                              last_offset["index"]) else last_offset

    def available_now_offset(self, start: Offset | None) -> Offset:
        return {"version": self._latest_version() + 1, "index": 0}

    def plan_splits(self, start: Offset, end: Offset) -> list[Split]:
        if not self.streaming:
            table = open_table(self.source.root, end["version"])
            check_protocol(table, self.source.root)
            actions = table.get_add_actions(flatten=True)
            columns = actions.column_names
            splits = []
            for index, row in enumerate(pa.table(actions).to_pylist()):
                partition = {c[len("partition."):]: row[c] for c in columns if c.startswith("partition.")}
                partition = {k: (None if v is None else str(v)) for k, v in partition.items()}
                splits.append(Split(split_id=f"s{end['version']}-{index}",
                                    state={"path": row["path"], "partitionValues": partition}))
            return splits
        splits = []
        version, index = start["version"], start["index"]
        while (version, index) < (end["version"], end["index"]):
            adds = self._adds(version)
            for position in range(index, len(adds)):
                if (version, position) >= (end["version"], end["index"]):
                    break
                add = adds[position]
                splits.append(Split(split_id=f"v{version}-{position}",
                                    state={"path": unquote(add["path"]), "partitionValues": add["partitionValues"]}))
            version, index = version + 1, 0
        return splits

    def supported_limits(self) -> frozenset[str]:
        return frozenset({"max_files", "max_bytes"})


class DeltaReader(SourceReader):
    """Executor side: one data file, its partition values added as typed columns."""

    def __init__(self, root: Path, schema: pa.Schema):
        self.root = root
        self.schema = schema

    def read(self, split: Split) -> Iterator[pa.RecordBatch]:
        table = pq.read_table(self.root / split.state["path"])
        columns = []
        for field in self.schema:
            if field.name in split.state["partitionValues"]:
                value = split.state["partitionValues"][field.name]
                text = pa.array([value] * table.num_rows, pa.string())
                columns.append(text if pa.types.is_string(field.type) else pc.cast(text, field.type))
            elif field.name in table.column_names:
                columns.append(table[field.name].cast(field.type))
            else:  # a column added later by a schema change: null in older files
                columns.append(pa.nulls(table.num_rows, field.type))
        yield from pa.Table.from_arrays(columns, schema=self.schema).to_batches()


class DeltaSource(Source):
    """Validates options on the driver; the schema is the table's (latest, or ``versionAsOf``)."""

    def __init__(self, options: Mapping[str, str] | None = None):
        super().__init__(options)
        opts = Options(options)
        opts.reject_unknown(KNOWN_OPTIONS)
        path = opts.require(OPTION_PATH)
        scheme = urlparse(path).scheme
        if scheme not in ("", "file"):
            raise ConfigError(OPTION_PATH, f"'{path}': scheme '{scheme}://' is not served by the sparklink.delta "
                              "source yet", "a local path")
        self.root = Path(urlparse(path).path if scheme == "file" else path).absolute()
        self.version_as_of = (parse_int(OPTION_VERSION_AS_OF, opts[OPTION_VERSION_AS_OF], minimum=0)
                              if OPTION_VERSION_AS_OF in opts else None)
        self.starting_version = (parse_int(OPTION_STARTING_VERSION, opts[OPTION_STARTING_VERSION], minimum=0)
                                 if OPTION_STARTING_VERSION in opts else 0)
        self.max_files = parse_int(OPTION_MAX_FILES, opts.get(OPTION_MAX_FILES, str(DEFAULT_MAX_FILES)), minimum=1)
        self.max_bytes = parse_size(OPTION_MAX_BYTES, opts[OPTION_MAX_BYTES]) if OPTION_MAX_BYTES in opts else None
        self.skip_change_commits = parse_bool(OPTION_SKIP_CHANGE_COMMITS, opts.get(OPTION_SKIP_CHANGE_COMMITS, "false"))
        table = open_table(self.root, self.version_as_of)
        check_protocol(table, self.root)
        arrow = pa.schema(table.schema().to_arrow())
        self.spark_schema = from_arrow_schema(arrow)

    @property
    def boundedness(self) -> Boundedness:
        return Boundedness.CONTINUOUS_UNBOUNDED

    def schema(self) -> StructType:
        return self.spark_schema

    def create_enumerator(self, *, streaming: bool) -> DeltaEnumerator:
        if streaming and self.version_as_of is not None:
            raise ConfigError(OPTION_VERSION_AS_OF, "applies to spark.read; a stream starts at startingVersion")
        return DeltaEnumerator(self, streaming=streaming)

    def create_reader(self, schema: StructType) -> DeltaReader:
        return DeltaReader(self.root, to_arrow_schema(schema))

    def default_read_limit(self) -> ReadLimit:
        if self.max_bytes is not None:
            return ReadLimit(max_files=self.max_files, max_bytes=self.max_bytes)
        return ReadLimit(max_files=self.max_files)
