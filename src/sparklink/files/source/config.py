"""The file source's options: keys, defaults and the validated configuration object.

Parsed on the driver when a query starts (every option is checked there, so a bad value fails
before any file is read); the resulting :class:`FileSourceConfig` is pickled to executors
with the source.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field

from sparklink.errors import ConfigError
from sparklink.options import Options, parse_bool, parse_choice, parse_duration, parse_int, parse_size
from sparklink.storage.location import LocalLocation, MemoryLocation, parse_location
from sparklink.storage.s3_config import OPTION_S3_ALLOW_UNCONDITIONAL_WRITES, S3_OPTIONS, S3Config

OPTION_PATH = "path"
OPTION_PATHS = "paths"
OPTION_FORMAT = "format"
OPTION_MAX_FILES_PER_TRIGGER = "maxFilesPerTrigger"
OPTION_MAX_BYTES_PER_TRIGGER = "maxBytesPerTrigger"
OPTION_MIN_FILE_AGE = "minFileAge"
OPTION_MAX_FILE_AGE = "maxFileAge"
OPTION_PATH_GLOB_FILTER = "pathGlobFilter"
OPTION_MONITOR_INTERVAL = "monitorInterval"
OPTION_BOUNDED = "bounded"
OPTION_FILE_ENUMERATOR = "fileEnumerator"
OPTION_MAX_SPLIT_BYTES = "maxSplitBytes"
OPTION_MIN_PARTITIONS = "minPartitions"
OPTION_HEADER = "header"
OPTION_DELIMITER = "delimiter"
OPTION_SEP = "sep"
OPTION_QUOTE = "quote"
OPTION_ESCAPE = "escape"
OPTION_MULTI_LINE = "multiLine"
OPTION_INFER_SCHEMA = "inferSchema"
OPTION_MODE = "mode"
OPTION_CORRUPT_COLUMN = "columnNameOfCorruptRecord"
OPTION_IGNORE_CORRUPT_FILES = "ignoreCorruptFiles"
OPTION_IGNORE_MISSING_FILES = "ignoreMissingFiles"
OPTION_COMPRESSION = "compression"
OPTION_BATCH_SIZE = "batchSize"
OPTION_MAX_VISIBILITY_DELAY = "maxVisibilityDelay"
OPTION_USE_INCREMENTAL_LISTING = "useIncrementalListing"
# the sink's S3 settings, but for the one about writes (the source never writes)
SOURCE_S3_OPTIONS = tuple(key for key in S3_OPTIONS if key != OPTION_S3_ALLOW_UNCONDITIONAL_WRITES)

KNOWN_OPTIONS = (
    OPTION_PATH, OPTION_PATHS, OPTION_FORMAT, OPTION_MAX_FILES_PER_TRIGGER, OPTION_MAX_BYTES_PER_TRIGGER,
    OPTION_MIN_FILE_AGE, OPTION_MAX_FILE_AGE, OPTION_PATH_GLOB_FILTER, OPTION_MONITOR_INTERVAL, OPTION_BOUNDED,
    OPTION_FILE_ENUMERATOR, OPTION_MAX_SPLIT_BYTES, OPTION_MIN_PARTITIONS, OPTION_HEADER, OPTION_DELIMITER,
    OPTION_SEP, OPTION_QUOTE, OPTION_ESCAPE, OPTION_MULTI_LINE, OPTION_INFER_SCHEMA, OPTION_MODE,
    OPTION_CORRUPT_COLUMN, OPTION_IGNORE_CORRUPT_FILES, OPTION_IGNORE_MISSING_FILES, OPTION_COMPRESSION,
    OPTION_BATCH_SIZE, OPTION_MAX_VISIBILITY_DELAY, OPTION_USE_INCREMENTAL_LISTING, *SOURCE_S3_OPTIONS,
)

FORMATS = ("text", "csv", "json", "parquet", "avro", "orc")
RECORD_FORMATS = ("text", "csv", "json")
BULK_FORMATS = ("parquet", "avro", "orc")
MODES = ("PERMISSIVE", "DROPMALFORMED", "FAILFAST")
COMPRESSIONS = ("auto", "none", "gzip", "zstd")

DEFAULT_MIN_FILE_AGE = 1.0
DEFAULT_MAX_SPLIT_BYTES = 128 * 1024 * 1024
DEFAULT_BATCH_ROWS = 65536            # rows per Arrow batch of the row formats when batchSize is not set
BATCH_TARGET_BYTES = 16 * 1024 * 1024  # Parquet without batchSize: batches of about this many decoded bytes
MAX_AUTO_BATCH_ROWS = 1024 * 1024     # ... but at most this many rows
DEFAULT_CORRUPT_COLUMN = "_corrupt_record"
DEFAULT_MAX_VISIBILITY_DELAY = 600.0  # S3: an object appears in listings within 10 min of its LastModified


def _single_char(option: str, value: str | None, *, allow_none: bool) -> str | None:
    if value is None:
        return None
    if value == "" and allow_none:
        return None
    if len(value) != 1:
        raise ConfigError(option, f"must be a single character, got {value!r}")
    return value


@dataclass(frozen=True, kw_only=True)
class CsvOptions:
    """How CSV text is parsed (executor side, once per file segment)."""

    header: bool = False
    delimiter: str = ","
    quote: str | None = '"'
    escape: str | None = None
    multi_line: bool = False

    def __post_init__(self) -> None:
        _single_char(OPTION_DELIMITER, self.delimiter, allow_none=False)
        _single_char(OPTION_QUOTE, self.quote, allow_none=True)
        _single_char(OPTION_ESCAPE, self.escape, allow_none=True)
        if self.delimiter in ("\n", "\r") or self.delimiter == self.quote:
            raise ConfigError(OPTION_DELIMITER, f"{self.delimiter!r} cannot be the delimiter")


@dataclass(frozen=True, kw_only=True)
class FileSourceConfig:
    """Every option of the file source, validated. Plain values only (it is pickled)."""

    paths: tuple[str, ...]
    format: str
    max_files_per_trigger: int | None = None
    max_bytes_per_trigger: int | None = None
    min_file_age: float = DEFAULT_MIN_FILE_AGE
    max_file_age: float | None = None
    path_glob_filter: str | None = None
    monitor_interval: float | None = None
    bounded: bool = False
    file_enumerator: str | None = None
    max_split_bytes: int = DEFAULT_MAX_SPLIT_BYTES
    min_partitions: int | None = None
    csv: CsvOptions = field(default_factory=CsvOptions)
    infer_schema: bool = False
    mode: str = "PERMISSIVE"
    corrupt_column: str = DEFAULT_CORRUPT_COLUMN
    ignore_corrupt_files: bool = False
    ignore_missing_files: bool = False
    compression: str = "auto"
    batch_size: int | None = None  # rows per Arrow batch; None: formats pick (see rows_per_batch)
    s3: S3Config | None = None     # set when the paths are s3:// / s3a:// URIs (then every path is)
    max_visibility_delay: float = DEFAULT_MAX_VISIBILITY_DELAY  # S3 only: see docs/file-source.md
    use_incremental_listing: bool = False  # S3 only: list after the settled keys (docs/file-source.md)

    @property
    def on_object_store(self) -> bool:
        """True when the paths are S3 prefixes (listed with ListObjectsV2, read by ranged GETs)."""
        return self.s3 is not None

    @property
    def rows_per_batch(self) -> int:
        """Rows per Arrow batch for formats that do not size batches from file metadata."""
        return self.batch_size or DEFAULT_BATCH_ROWS

    def __post_init__(self) -> None:
        if self.batch_size is not None and self.batch_size < 1:
            raise ConfigError(OPTION_BATCH_SIZE, f"must be at least 1, got {self.batch_size}")
        if not self.paths:
            raise ConfigError(OPTION_PATH, "is required")
        if self.format not in FORMATS:
            raise ConfigError(OPTION_FORMAT, f"unknown value '{self.format}'", ", ".join(FORMATS))
        if self.mode not in MODES:
            raise ConfigError(OPTION_MODE, f"unknown value '{self.mode}'", ", ".join(MODES))
        if self.compression not in COMPRESSIONS:
            raise ConfigError(OPTION_COMPRESSION, f"unknown value '{self.compression}'", ", ".join(COMPRESSIONS))
        if self.compression not in ("auto", "none") and self.format in BULK_FORMATS:
            raise ConfigError(OPTION_COMPRESSION, f"applies to text formats only; {self.format} files carry "
                              "their own compression", "auto, none")
        if self.max_split_bytes < 1024:
            raise ConfigError(OPTION_MAX_SPLIT_BYTES, f"must be at least 1KB, got {self.max_split_bytes}")
        if self.file_enumerator is not None and ":" not in self.file_enumerator:
            raise ConfigError(OPTION_FILE_ENUMERATOR, f"'{self.file_enumerator}' is not 'module:ClassName'")

    @property
    def splittable_text(self) -> bool:
        """Whether uncompressed files of this format can be cut into line-aligned byte ranges."""
        if self.format == "csv":
            return not self.csv.multi_line
        return self.format in ("text", "json")

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> "FileSourceConfig":
        """Parse and validate the user's string options (driver side, at query start)."""
        opts = Options(options)
        opts.reject_unknown(KNOWN_OPTIONS)
        paths, on_s3 = _parse_paths(opts)
        s3_set = [key for key in SOURCE_S3_OPTIONS if key in opts]
        if not on_s3:
            for key in (*s3_set, OPTION_MAX_VISIBILITY_DELAY, OPTION_USE_INCREMENTAL_LISTING):
                if key in opts:
                    raise ConfigError(key, f"applies to s3:// and s3a:// paths only; the source reads local "
                                      f"paths ({', '.join(paths)})")
        fmt = parse_choice(OPTION_FORMAT, opts.require(OPTION_FORMAT), FORMATS)

        def optional_int(key: str) -> int | None:
            return parse_int(key, opts[key], minimum=1) if key in opts else None

        delimiter = opts.get(OPTION_DELIMITER, opts.get(OPTION_SEP, ","))
        if delimiter == "\\t":
            delimiter = "\t"
        csv = CsvOptions(
            header=parse_bool(OPTION_HEADER, opts.get(OPTION_HEADER, "false")),
            delimiter=delimiter,
            quote=opts.get(OPTION_QUOTE, '"'),
            escape=opts.get(OPTION_ESCAPE) or None,
            multi_line=parse_bool(OPTION_MULTI_LINE, opts.get(OPTION_MULTI_LINE, "false")),
        )
        max_file_age = parse_duration(OPTION_MAX_FILE_AGE, opts[OPTION_MAX_FILE_AGE]) if OPTION_MAX_FILE_AGE in opts else None
        monitor = (parse_duration(OPTION_MONITOR_INTERVAL, opts[OPTION_MONITOR_INTERVAL])
                   if OPTION_MONITOR_INTERVAL in opts else None)
        corrupt_column = opts.get(OPTION_CORRUPT_COLUMN, DEFAULT_CORRUPT_COLUMN)
        if not corrupt_column.strip():
            raise ConfigError(OPTION_CORRUPT_COLUMN, "must not be empty")
        return cls(
            paths=paths,
            format=fmt,
            max_files_per_trigger=optional_int(OPTION_MAX_FILES_PER_TRIGGER),
            max_bytes_per_trigger=(parse_size(OPTION_MAX_BYTES_PER_TRIGGER, opts[OPTION_MAX_BYTES_PER_TRIGGER])
                                   if OPTION_MAX_BYTES_PER_TRIGGER in opts else None),
            min_file_age=parse_duration(OPTION_MIN_FILE_AGE, opts.get(OPTION_MIN_FILE_AGE, str(DEFAULT_MIN_FILE_AGE))),
            max_file_age=max_file_age,
            path_glob_filter=opts.get(OPTION_PATH_GLOB_FILTER) or None,
            monitor_interval=monitor,
            bounded=parse_bool(OPTION_BOUNDED, opts.get(OPTION_BOUNDED, "false")),
            file_enumerator=opts.get(OPTION_FILE_ENUMERATOR) or None,
            max_split_bytes=parse_size(OPTION_MAX_SPLIT_BYTES, opts.get(OPTION_MAX_SPLIT_BYTES, "128MB")),
            min_partitions=optional_int(OPTION_MIN_PARTITIONS),
            csv=csv,
            infer_schema=parse_bool(OPTION_INFER_SCHEMA, opts.get(OPTION_INFER_SCHEMA, "false")),
            mode=parse_choice(OPTION_MODE, opts.get(OPTION_MODE, "PERMISSIVE"), MODES),
            corrupt_column=corrupt_column,
            ignore_corrupt_files=parse_bool(OPTION_IGNORE_CORRUPT_FILES, opts.get(OPTION_IGNORE_CORRUPT_FILES, "false")),
            ignore_missing_files=parse_bool(OPTION_IGNORE_MISSING_FILES, opts.get(OPTION_IGNORE_MISSING_FILES, "false")),
            compression=parse_choice(OPTION_COMPRESSION, opts.get(OPTION_COMPRESSION, "auto"), COMPRESSIONS),
            batch_size=optional_int(OPTION_BATCH_SIZE),
            s3=S3Config.from_options({key: opts[key] for key in s3_set}) if on_s3 else None,
            max_visibility_delay=parse_duration(OPTION_MAX_VISIBILITY_DELAY, opts.get(
                OPTION_MAX_VISIBILITY_DELAY, str(DEFAULT_MAX_VISIBILITY_DELAY))),
            use_incremental_listing=parse_bool(OPTION_USE_INCREMENTAL_LISTING,
                                               opts.get(OPTION_USE_INCREMENTAL_LISTING, "false")),
        )


def _parse_paths(opts: Options) -> tuple[tuple[str, ...], bool]:
    """The source's paths (``path`` first, then the JSON list ``paths``) and whether they are S3
    prefixes. Local paths and S3 URIs are not mixed in one source; every other scheme is
    refused (:func:`~sparklink.storage.parse_location`)."""
    named: list[tuple[str, str]] = []
    if OPTION_PATH in opts or OPTION_PATHS not in opts:
        named.append((OPTION_PATH, opts[OPTION_PATH] if OPTION_PATHS in opts else opts.require(OPTION_PATH)))
    if OPTION_PATHS in opts:
        try:
            decoded = json.loads(opts[OPTION_PATHS])
        except json.JSONDecodeError:
            raise ConfigError(OPTION_PATHS, "must be a JSON list of paths") from None
        if not isinstance(decoded, list) or not all(isinstance(p, str) and p for p in decoded):
            raise ConfigError(OPTION_PATHS, "must be a JSON list of non-empty paths")
        named.extend((OPTION_PATHS, p) for p in decoded)
    locations = [(option, parse_location(option, path)) for option, path in named]
    for option, location in locations:
        if isinstance(location, MemoryLocation):
            raise ConfigError(option, f"'{location.uri()}': the file source reads local paths and S3 prefixes, not a "
                              "memory store (it plans in the driver and reads in executors, other processes)")
    local = [loc.path for _, loc in locations if isinstance(loc, LocalLocation)]
    remote = [loc.uri() for _, loc in locations if not isinstance(loc, LocalLocation)]
    if local and remote:
        raise ConfigError(OPTION_PATHS if OPTION_PATHS in opts else OPTION_PATH,
                          f"mixes local paths ({', '.join(local)}) and S3 prefixes ({', '.join(remote)}); one "
                          "source reads one kind: use two sources and union them")
    return (tuple(remote), True) if remote else (tuple(local), False)
