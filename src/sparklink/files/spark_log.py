"""Spark's file sink log, ``<path>/_spark_metadata`` (driver side), written and read, on local
disk and on S3 alike (through the storage seam's metadata operations: list, read,
create-if-absent, delete).

Spark's readers of a directory that holds ``_spark_metadata`` (``spark.read.parquet(path)``,
Spark's streaming file source, and the sparklink file source) read only the files the log
names. The on-disk format, as Spark 4.x reads it (checked against PySpark 4.3):

* one file per log batch, ``_spark_metadata/<id>``: the line ``v1``, then one JSON object per
  line: ``path`` (a URI: ``file:///...`` on local disk, ``s3a://bucket/key`` or
  ``s3://bucket/key`` on S3, the scheme the user gave the output), ``size``, ``isDir``, ``modificationTime`` (ms), ``blockReplication``,
  ``blockSize``, ``action`` (``"add"``);
* every ``compactInterval`` batches (ids with ``(id + 1) % compactInterval == 0``) the file
  is ``<id>.compact`` and lists every file of the log up to that batch; a reader reads the
  newest compact file and the batch files after it;
* Spark 4.x has no ``delete`` action: every entry it finds is a file to read. A file leaves
  the log only by being left out of the next compact file.

The sparklink file sink appends one log batch per commit that finishes files (its ids are the
log's own sequence, not Spark's micro-batch ids, so ``df.write`` jobs and
``sparklink.files.finish`` append too). The batch is written at the end of the commit, after
every file it names is in place, with a create-if-absent (local disk: temporary file, hard
link; S3: ``PutObject`` with ``If-None-Match: *``), so a crash leaves the batch wholly in the
log or not at all; the roll-forward of the commit writes
it again unless the newest log batch already names the commit's files.

Options keep the meaning of Spark's SQL settings of the same names (a Python data source
cannot read the session's SQL conf, so they are options of the sink):
``spark.sql.streaming.fileSink.log.compactInterval`` (10), ``.cleanupDelay`` (10 minutes:
how long an old log file is kept after a newer compact file replaced it) and ``.deletion``
(true: old log files are deleted at all). An existing log keeps its interval (derived from
its compact files, as Spark does).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from sparklink.errors import CommitError, ConfigError, DataError
from sparklink.options import BOOL, Applies, Option, Options, OptionTable, custom, integer, parse_duration
from sparklink.storage import uris
from sparklink.storage.base import FileStorage, ObjectInfo
from sparklink.storage.uris import uri_of as uri_of  # how the log names a local file (tests, the CLI)

VERSION_LINE = "v1"
COMPACT_SUFFIX = ".compact"
ADD_ACTION = "add"
DELETE_ACTION = "delete"  # written by Spark 2.x only; honoured when reading old logs
LOCAL_BLOCK_SIZE = 32 * 1024 * 1024  # what Hadoop's local file system reports
_LOG_FILE = re.compile(r"^(\d+)(\.compact)?$")
METADATA_DIR = "_spark_metadata"  # the log's directory in the output
DEFAULT_COMPACT_INTERVAL = 10
DEFAULT_CLEANUP_DELAY = 600.0


def spark_time(option: str, value: str) -> float:
    """A Spark time setting in seconds: a bare number is milliseconds, as in Spark's conf."""
    if value.strip().isdigit():
        return int(value.strip()) / 1000
    return parse_duration(option, value)


_SPARK_LOG = Applies("sparkMetadata", ("true",), "applies only with sparkMetadata=true", "`sparkMetadata` `true`")


class SparkLogOptions(OptionTable):
    """The options of Spark's log, declared here beside the log; the file sink's table
    (:class:`~sparklink.files.sink.options.FileSinkOptions`) includes them. This module imports
    nothing of the sink or the source: both use it."""

    spark_metadata = Option("sparkMetadata", BOOL, default=True, example="false",
                            doc="write Spark's file sink log `_spark_metadata`, for streaming and batch writes")
    log_compact_interval = Option("spark.sql.streaming.fileSink.log.compactInterval", integer(1),
                                  default=DEFAULT_COMPACT_INTERVAL, applies=_SPARK_LOG,
                                  doc="Spark's log: a compact file every this many log batches")
    log_cleanup_delay = Option("spark.sql.streaming.fileSink.log.cleanupDelay",
                               custom(spark_time, "duration (a bare number is milliseconds, as in Spark)"),
                               default=DEFAULT_CLEANUP_DELAY, default_doc="`10min`", applies=_SPARK_LOG,
                               doc="Spark's log: how long a replaced log file (and an expired data file) is kept for "
                                   "readers that listed it")
    log_deletion = Option("spark.sql.streaming.fileSink.log.deletion", BOOL, default=True, applies=_SPARK_LOG,
                          doc="Spark's log: delete replaced log files at all")


O = SparkLogOptions


@dataclass(frozen=True, kw_only=True)
class SinkFileStatus:
    """One line of a log batch (Spark's ``SinkFileStatus``)."""

    path: str
    size: int
    modification_time: int
    is_dir: bool = False
    block_replication: int = 1
    block_size: int = LOCAL_BLOCK_SIZE
    action: str = ADD_ACTION

    def to_line(self) -> str:
        return json.dumps({"path": self.path, "size": self.size, "isDir": self.is_dir,
                           "modificationTime": self.modification_time, "blockReplication": self.block_replication,
                           "blockSize": self.block_size, "action": self.action}, separators=(",", ":"))

    @classmethod
    def from_json(cls, data: dict) -> "SinkFileStatus":
        return cls(path=data["path"], size=int(data["size"]), modification_time=int(data["modificationTime"]),
                   is_dir=bool(data.get("isDir", False)), block_replication=int(data.get("blockReplication", 1)),
                   block_size=int(data.get("blockSize", LOCAL_BLOCK_SIZE)), action=data.get("action", ADD_ACTION))

    def local_path(self) -> str:
        """The file's local path; a URI of another scheme is refused, never guessed."""
        return local_path_of(self.path)



def local_path_of(uri: str) -> str:
    """The local path a ``file:`` URI of the log names (:func:`sparklink.storage.uris.local_path_of`)."""
    return uris.local_path_of(uri, what=METADATA_DIR)


@dataclass(frozen=True, kw_only=True)
class SparkLogConfig:
    """How the sink keeps Spark's log (validated at query start)."""

    compact_interval: int = DEFAULT_COMPACT_INTERVAL
    cleanup_delay: float = DEFAULT_CLEANUP_DELAY
    deletion: bool = True
    retention: float | None = None  # seconds; files committed longer ago leave the log at the next compact

    def __post_init__(self) -> None:
        if self.compact_interval < 1:
            raise ConfigError(O.log_compact_interval.key, f"must be at least 1, got {self.compact_interval}")
        if self.cleanup_delay < 0:
            raise ConfigError(O.log_cleanup_delay.key, f"must not be negative, got {self.cleanup_delay}")


def spark_log_config(opts: Options, *, retention: float | None, default: bool = True) -> SparkLogConfig | None:
    """The Spark log settings from the sink's options; None when ``sparkMetadata`` is false
    (``default`` when it is not set)."""
    enabled = O.spark_metadata.get(opts) if O.spark_metadata.given(opts) else default
    if not enabled:
        O.check_applies(opts, O.spark_metadata.key, "false")
        return None
    return SparkLogConfig(compact_interval=O.log_compact_interval.value(opts),
                          cleanup_delay=O.log_cleanup_delay.value(opts),
                          deletion=O.log_deletion.value(opts), retention=retention)


def derive_compact_interval(default: int, latest_compact: int) -> int:
    """The interval a log with one compact file (at ``latest_compact``) was written with, the
    rule Spark applies: the first divisor of ``latest_compact + 1`` not below ``default``."""
    batches = latest_compact + 1
    if batches <= default:
        return batches
    for candidate in range(default, batches // 2 + 1):
        if batches % candidate == 0:
            return candidate
    return batches


class SparkLog:
    """The ``_spark_metadata`` log of one output (driver side; one writer at a time).

    ``output`` is the output's storage (local disk or S3). Every request goes
    through the storage seam: one listing of ``_spark_metadata/`` per read of the log (it
    gives the names, sizes and times of the log files), one read per log file read, one
    create-if-absent per log batch written."""

    def __init__(self, output: FileStorage, config: SparkLogConfig | None = None):
        self.storage = output
        self.config = config or SparkLogConfig()
        self.location = self.storage.uri(METADATA_DIR)  # for messages

    # ------------------------------------------------------------------ naming

    def uri(self, relative: str) -> str:
        """The URI the log names the output's file ``relative`` by (as Spark's readers parse it)."""
        return uri_in(self.storage, relative)

    def relative(self, uri: str) -> str | None:
        """The key under the output of a URI the log names; None if it names a file elsewhere."""
        return relative_in(self.storage, uri)

    def status(self, relative: str, *, committed_at: float, size: int | None = None) -> SinkFileStatus:
        """The log line of the finished file ``relative``: ``size`` when the caller knows it
        (else one stat / ``HeadObject``), its commit time as modification time (monotonic in
        commit order, which the sparklink file source relies on)."""
        if size is None:
            info = self.storage.info(relative)
            if info is None:
                raise CommitError(f"{self.storage.uri(relative)} is not there: it cannot be named in {self.location}")
            size = info.size
        return SinkFileStatus(path=self.uri(relative), size=size, modification_time=int(round(committed_at * 1000)))

    # ------------------------------------------------------------------ reading

    def exists(self) -> bool:
        return bool(self._listing())

    def _listing(self) -> dict[int, ObjectInfo]:
        """Log batch id -> its file, for every batch file present (temporary files ignored)."""
        found: dict[int, ObjectInfo] = {}
        for info in self.storage.list(f"{METADATA_DIR}/"):
            name = info.key[len(METADATA_DIR) + 1:]
            match = _LOG_FILE.match(name)
            if match:
                found[int(match.group(1))] = info
        return found

    def log_files(self) -> dict[int, str]:
        """Log batch id -> file name, for every batch file present (temporary files ignored)."""
        return {batch: info.key[len(METADATA_DIR) + 1:] for batch, info in self._listing().items()}

    def latest_id(self) -> int | None:
        files = self.log_files()
        return max(files) if files else None

    def compact_interval(self, files: dict[int, str] | None = None) -> int:
        files = self.log_files() if files is None else files
        compacts = sorted(b for b, name in files.items() if name.endswith(COMPACT_SUFFIX))
        if len(compacts) >= 2:
            return compacts[-1] - compacts[-2]
        if len(compacts) == 1:
            return derive_compact_interval(self.config.compact_interval, compacts[0])
        return self.config.compact_interval

    def read_file(self, name: str) -> list[SinkFileStatus]:
        """The entries of log file ``name``; FileNotFoundError if it is gone."""
        source = self.storage.uri(f"{METADATA_DIR}/{name}")
        stored = self.storage.read(f"{METADATA_DIR}/{name}")
        if stored is None:
            raise FileNotFoundError(source)
        lines = stored.data.decode("utf-8", errors="replace").split("\n")
        if not lines or not lines[0].startswith("v"):
            raise DataError(f"{source}: not a Spark file sink log file (its first line is not a version)")
        version = lines[0].strip()
        if version != VERSION_LINE:
            raise DataError(f"{source}: log version '{version}' is not supported (sparklink reads '{VERSION_LINE}')")
        entries = []
        for number, line in enumerate(lines[1:], start=2):
            if not line.strip():
                continue
            try:
                entries.append(SinkFileStatus.from_json(json.loads(line)))
            except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
                raise DataError(f"{source}, line {number}: not a file status: {exc}") from None
        return entries

    def view(self) -> list[SinkFileStatus]:
        """The files a reader sees: the newest compact file and every batch after it (Spark's
        ``allFiles``), with Spark 2.x ``delete`` entries honoured. Retries once if a cleanup
        removed a file while it was read."""
        for attempt in range(2):
            files = self.log_files()
            if not files:
                return []
            latest = max(files)
            compacts = [b for b, name in files.items() if name.endswith(COMPACT_SUFFIX)]
            start = max(compacts) if compacts else 0
            try:
                entries: list[SinkFileStatus] = []
                for batch in range(start, latest + 1):
                    name = files.get(batch)
                    if name is None:
                        raise DataError(f"{self.location}: log batch {batch} is missing (batches {start}.."
                                        f"{latest} are needed to read the log)")
                    entries.extend(self.read_file(name))
                return _visible(entries)
            except FileNotFoundError:
                if attempt == 1:
                    raise
        return []

    def referenced_keys(self) -> set[str]:
        """Keys under the output named by any log file still there (old views included)."""
        keys: set[str] = set()
        for name in self.log_files().values():
            try:
                entries = self.read_file(name)
            except FileNotFoundError:
                continue
            keys.update(key for key in (self.relative(e.path) for e in entries) if key is not None)
        return keys

    def referenced_paths(self) -> set[str]:
        """:meth:`referenced_keys` as the storage names them (local disk: absolute paths)."""
        return {self.storage.uri(key) for key in self.referenced_keys()}

    # ------------------------------------------------------------------ writing

    def commit(self, files: list[SinkFileStatus], *, now: float,
               existing: Callable[[], Iterable[SinkFileStatus]] | None = None) -> int | None:
        """Append one log batch naming ``files`` (idempotent: nothing is written if the newest
        batch already names them, the case of a rolled-forward commit). ``existing`` gives the
        files an output already had before its log was started: they go into the first batch,
        so that starting the log hides nothing. Returns the batch id, None for no files.

        Requests in steady state: one listing of the log, one read of its newest file, one
        create-if-absent; a compact batch also reads the files of the view it compacts and
        deletes the log files past ``cleanupDelay``."""
        if not files:
            return None
        listing = self._listing()
        names = {batch: info.key[len(METADATA_DIR) + 1:] for batch, info in listing.items()}
        latest = max(names) if names else None
        if latest is not None:
            logged = self.read_file(names[latest])
            files = _in_scheme_of(logged, files)
            if files[0].path in {e.path for e in logged}:
                return latest
        batch = 0 if latest is None else latest + 1
        interval = self.compact_interval(names)
        if latest is None and existing is not None:
            files = _dedupe(list(existing()) + files)
        if (batch + 1) % interval == 0:
            entries = _dedupe([e for e in self.view() if self._retained(e, now)] + files)
            self._write(f"{batch}{COMPACT_SUFFIX}", entries)
            self._clean_up(listing, batch, interval, now)
        else:
            self._write(str(batch), files)
        return batch

    def _retained(self, entry: SinkFileStatus, now: float) -> bool:
        retention = self.config.retention
        return retention is None or now * 1000 - entry.modification_time <= retention * 1000

    def _write(self, name: str, entries: list[SinkFileStatus]) -> None:
        data = "\n".join([VERSION_LINE] + [entry.to_line() for entry in entries]).encode("utf-8")
        if self.storage.create_if_absent(f"{METADATA_DIR}/{name}", data) is None:
            raise CommitError(f"{self.storage.uri(f'{METADATA_DIR}/{name}')} already exists: another writer appends "
                              f"to this {METADATA_DIR} log")

    def _clean_up(self, listing: dict[int, ObjectInfo], compact_batch: int, interval: int, now: float) -> None:
        """After compact batch ``compact_batch``: delete log files before the previous compact
        batch that are older than ``cleanupDelay`` (Spark's rule; readers that listed the older
        view before the delay can still read it). ``listing``: the log files listed before the
        compact batch was written (their times come with the listing)."""
        if not self.config.deletion:
            return
        oldest_kept = compact_batch - interval
        for batch, info in listing.items():
            if batch < oldest_kept and info.modified_at <= now - self.config.cleanup_delay:
                self.storage.delete(info.key)

    def total_bytes(self) -> int:
        return sum(info.size for info in self._listing().values())


def _in_scheme_of(logged: list[SinkFileStatus], files: list[SinkFileStatus]) -> list[SinkFileStatus]:
    """``files`` named in the spelling the log already uses (:func:`sparklink.storage.uris.in_spelling_of`):
    an output keeps the one of its first batch."""
    if not logged or not files:
        return files
    return [replace(f, path=uris.in_spelling_of(logged[0].path, f.path)) for f in files]


def _dedupe(entries: list[SinkFileStatus]) -> list[SinkFileStatus]:
    seen: dict[str, SinkFileStatus] = {}
    for entry in entries:
        seen[entry.path] = entry
    return list(seen.values())


def _visible(entries: list[SinkFileStatus]) -> list[SinkFileStatus]:
    deleted = {e.path for e in entries if e.action == DELETE_ACTION}
    return _dedupe([e for e in entries if e.action != DELETE_ACTION and e.path not in deleted])


def status_for(root: FileStorage, relative: str, *, committed_at: float,
               size: int | None = None) -> SinkFileStatus:
    """The log line of the finished file ``relative`` of the output on ``root``, see
    :meth:`SparkLog.status`."""
    return SparkLog(root).status(relative, committed_at=committed_at, size=size)


uri_in = uris.uri_in  # how the log names a finished file (the storage seam decides the spelling)


def relative_in(storage: FileStorage, uri: str) -> str | None:
    """The key under ``storage`` that the log's ``uri`` names, None if it names a file elsewhere
    (:func:`sparklink.storage.uris.relative_in`)."""
    return uris.relative_in(storage, uri, what=METADATA_DIR)
