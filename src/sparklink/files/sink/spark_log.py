"""Spark's file sink log, ``<path>/_spark_metadata`` (driver side), written and read.

Spark's readers of a directory that holds ``_spark_metadata`` (``spark.read.parquet(path)``,
Spark's streaming file source, and the sparklink file source) read only the files the log
names. The on-disk format, as Spark 4.x reads it (checked against PySpark 4.3):

* one file per log batch, ``_spark_metadata/<id>``: the line ``v1``, then one JSON object per
  line: ``path`` (a URI), ``size``, ``isDir``, ``modificationTime`` (ms), ``blockReplication``,
  ``blockSize``, ``action`` (``"add"``);
* every ``compactInterval`` batches (ids with ``(id + 1) % compactInterval == 0``) the file
  is ``<id>.compact`` and lists every file of the log up to that batch; a reader reads the
  newest compact file and the batch files after it;
* Spark 4.x has no ``delete`` action: every entry it finds is a file to read. A file leaves
  the log only by being left out of the next compact file.

The sparklink file sink appends one log batch per commit that finishes files (its ids are the
log's own sequence, not Spark's micro-batch ids, so ``df.write`` jobs and
``sparklink.files.finish`` append too). The batch is written at the end of the commit, after
every file it names is in place, with a create-if-absent (temporary file, hard link), so a
crash leaves the batch wholly in the log or not at all; the roll-forward of the commit writes
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
import os
import re
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, unquote, urlparse

from sparklink.errors import CommitError, ConfigError, DataError
from sparklink.options import Options, parse_bool, parse_duration, parse_int

METADATA_DIR = "_spark_metadata"
VERSION_LINE = "v1"
COMPACT_SUFFIX = ".compact"
ADD_ACTION = "add"
DELETE_ACTION = "delete"  # written by Spark 2.x only; honoured when reading old logs
OPTION_SPARK_METADATA = "sparkMetadata"
OPTION_COMPACT_INTERVAL = "spark.sql.streaming.fileSink.log.compactInterval"
OPTION_CLEANUP_DELAY = "spark.sql.streaming.fileSink.log.cleanupDelay"
OPTION_LOG_DELETION = "spark.sql.streaming.fileSink.log.deletion"
DEFAULT_COMPACT_INTERVAL = 10
DEFAULT_CLEANUP_DELAY = 600.0
LOCAL_BLOCK_SIZE = 32 * 1024 * 1024  # what Hadoop's local file system reports
_LOG_FILE = re.compile(r"^(\d+)(\.compact)?$")


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


def uri_of(path: Path) -> str:
    """``file:///abs/path`` with the characters a URI may not hold escaped (Spark parses it with java.net.URI)."""
    return "file://" + quote(str(Path(path).absolute()))


def local_path_of(uri: str) -> str:
    parsed = urlparse(uri)
    if parsed.scheme == "file" and parsed.netloc in ("", "localhost"):
        return unquote(parsed.path)
    if parsed.scheme == "" and uri.startswith("/"):
        return uri
    raise DataError(f"{METADATA_DIR} names '{uri}', which is not a local file (scheme '{parsed.scheme}'); "
                    "sparklink reads local paths only")


@dataclass(frozen=True, kw_only=True)
class SparkLogConfig:
    """How the sink keeps Spark's log (validated at query start)."""

    compact_interval: int = DEFAULT_COMPACT_INTERVAL
    cleanup_delay: float = DEFAULT_CLEANUP_DELAY
    deletion: bool = True
    retention: float | None = None  # seconds; files committed longer ago leave the log at the next compact

    def __post_init__(self) -> None:
        if self.compact_interval < 1:
            raise ConfigError(OPTION_COMPACT_INTERVAL, f"must be at least 1, got {self.compact_interval}")
        if self.cleanup_delay < 0:
            raise ConfigError(OPTION_CLEANUP_DELAY, f"must not be negative, got {self.cleanup_delay}")


SPARK_LOG_OPTIONS = (OPTION_SPARK_METADATA, OPTION_COMPACT_INTERVAL, OPTION_CLEANUP_DELAY, OPTION_LOG_DELETION)


def spark_log_config(opts: Options, *, retention: float | None, default: str = "true") -> SparkLogConfig | None:
    """The Spark log settings from the sink's options; None when ``sparkMetadata`` is false
    (``default`` when it is not set)."""
    if not parse_bool(OPTION_SPARK_METADATA, opts.get(OPTION_SPARK_METADATA, default)):
        for key in SPARK_LOG_OPTIONS[1:]:
            if key in opts:
                raise ConfigError(key, f"applies only with {OPTION_SPARK_METADATA}=true")
        return None
    return SparkLogConfig(
        compact_interval=parse_int(OPTION_COMPACT_INTERVAL, opts.get(OPTION_COMPACT_INTERVAL, DEFAULT_COMPACT_INTERVAL),
                                   minimum=1),
        cleanup_delay=_spark_time(OPTION_CLEANUP_DELAY, opts.get(OPTION_CLEANUP_DELAY)),
        deletion=parse_bool(OPTION_LOG_DELETION, opts.get(OPTION_LOG_DELETION, "true")),
        retention=retention)


def _spark_time(option: str, value: str | None) -> float:
    """A Spark time setting in seconds: a bare number is milliseconds, as in Spark's conf."""
    if value is None:
        return DEFAULT_CLEANUP_DELAY
    if value.strip().isdigit():
        return int(value.strip()) / 1000
    return parse_duration(option, value)


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
    """The ``_spark_metadata`` directory of one output (driver side; one writer at a time)."""

    def __init__(self, root: str | Path, config: SparkLogConfig | None = None):
        self.root = Path(root).absolute()
        self.directory = self.root / METADATA_DIR
        self.config = config or SparkLogConfig()

    # ------------------------------------------------------------------ reading

    def exists(self) -> bool:
        return self.directory.is_dir()

    def log_files(self) -> dict[int, str]:
        """Log batch id -> file name, for every batch file present (temporary files ignored)."""
        if not self.directory.is_dir():
            return {}
        found: dict[int, str] = {}
        for name in os.listdir(self.directory):
            match = _LOG_FILE.match(name)
            if match:
                found[int(match.group(1))] = name
        return found

    def latest_id(self) -> int | None:
        files = self.log_files()
        return max(files) if files else None

    def compact_interval(self) -> int:
        compacts = sorted(b for b, name in self.log_files().items() if name.endswith(COMPACT_SUFFIX))
        if len(compacts) >= 2:
            return compacts[-1] - compacts[-2]
        if len(compacts) == 1:
            return derive_compact_interval(self.config.compact_interval, compacts[0])
        return self.config.compact_interval

    def read_file(self, name: str) -> list[SinkFileStatus]:
        path = self.directory / name
        with open(path, encoding="utf-8") as handle:
            lines = handle.read().split("\n")
        if not lines or not lines[0].startswith("v"):
            raise DataError(f"{path}: not a Spark file sink log file (its first line is not a version)")
        version = lines[0].strip()
        if version != VERSION_LINE:
            raise DataError(f"{path}: log version '{version}' is not supported (sparklink reads '{VERSION_LINE}')")
        entries = []
        for number, line in enumerate(lines[1:], start=2):
            if not line.strip():
                continue
            try:
                entries.append(SinkFileStatus.from_json(json.loads(line)))
            except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
                raise DataError(f"{path}, line {number}: not a file status: {exc}") from None
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
                        raise DataError(f"{self.directory}: log batch {batch} is missing (batches {start}.."
                                        f"{latest} are needed to read the log)")
                    entries.extend(self.read_file(name))
                return _visible(entries)
            except FileNotFoundError:
                if attempt == 1:
                    raise
        return []

    def referenced_paths(self) -> set[str]:
        """Local paths named by any log file still on disk (old views included)."""
        paths: set[str] = set()
        for name in self.log_files().values():
            try:
                paths.update(e.local_path() for e in self.read_file(name))
            except FileNotFoundError:
                continue
        return paths

    # ------------------------------------------------------------------ writing

    def commit(self, files: list[SinkFileStatus], *, now: float,
               existing: Callable[[], Iterable[SinkFileStatus]] | None = None) -> int | None:
        """Append one log batch naming ``files`` (idempotent: nothing is written if the newest
        batch already names them, the case of a rolled-forward commit). ``existing`` gives the
        files an output already had before its log was started: they go into the first batch,
        so that starting the log hides nothing. Returns the batch id, None for no files."""
        if not files:
            return None
        latest = self.latest_id()
        if latest is not None:
            names = {e.path for e in self.read_file(self.log_files()[latest])}
            if files[0].path in names:
                return latest
        batch = 0 if latest is None else latest + 1
        interval = self.compact_interval()
        if latest is None and existing is not None:
            files = _dedupe(list(existing()) + files)
        if (batch + 1) % interval == 0:
            entries = _dedupe([e for e in self.view() if self._retained(e, now)] + files)
            self._write(f"{batch}{COMPACT_SUFFIX}", entries)
            self._clean_up(batch, interval, now)
        else:
            self._write(str(batch), files)
        return batch

    def _retained(self, entry: SinkFileStatus, now: float) -> bool:
        retention = self.config.retention
        return retention is None or now * 1000 - entry.modification_time <= retention * 1000

    def _write(self, name: str, entries: list[SinkFileStatus]) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        target = self.directory / name
        fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=self.directory)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(VERSION_LINE)
                for entry in entries:
                    handle.write("\n" + entry.to_line())
                handle.flush()
                os.fsync(handle.fileno())
            os.link(tmp, target)
        except FileExistsError:
            raise CommitError(f"{target} already exists: another writer appends to this {METADATA_DIR} log") from None
        finally:
            Path(tmp).unlink(missing_ok=True)
        dir_fd = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)

    def _clean_up(self, compact_batch: int, interval: int, now: float) -> None:
        """After compact batch ``compact_batch``: delete log files before the previous compact
        batch that are older than ``cleanupDelay`` (Spark's rule; readers that listed the older
        view before the delay can still read it)."""
        if not self.config.deletion:
            return
        oldest_kept = compact_batch - interval
        for batch, name in self.log_files().items():
            if batch < oldest_kept:
                path = self.directory / name
                try:
                    if path.stat().st_mtime <= now - self.config.cleanup_delay:
                        path.unlink()
                except FileNotFoundError:
                    continue

    def total_bytes(self) -> int:
        return sum((self.directory / name).stat().st_size for name in self.log_files().values())


def _dedupe(entries: list[SinkFileStatus]) -> list[SinkFileStatus]:
    seen: dict[str, SinkFileStatus] = {}
    for entry in entries:
        seen[entry.path] = entry
    return list(seen.values())


def _visible(entries: list[SinkFileStatus]) -> list[SinkFileStatus]:
    deleted = {e.path for e in entries if e.action == DELETE_ACTION}
    return _dedupe([e for e in entries if e.action != DELETE_ACTION and e.path not in deleted])


def status_for(root: Path, relative: str, *, committed_at: float) -> SinkFileStatus:
    """The log line of a finished file: its size now, and its commit time as modification
    time (monotonic in commit order, which the sparklink file source relies on)."""
    path = root / relative
    return SinkFileStatus(path=uri_of(path), size=path.stat().st_size,
                          modification_time=int(round(committed_at * 1000)))

