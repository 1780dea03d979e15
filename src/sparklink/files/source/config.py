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
from sparklink.options import (
    BOOL,
    DURATION,
    NON_EMPTY,
    SIZE,
    Applies,
    Option,
    Options,
    applies_to_option,
    choice,
    integer,
    string,
)
from sparklink.storage.location import LocalLocation, MemoryLocation, parse_location
from sparklink.storage.s3_config import ON_S3, S3Config, S3Options

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
_CSV = applies_to_option("format", "csv")
_TEXT = applies_to_option("format", *RECORD_FORMATS)
_PARSED = applies_to_option("format", "csv", "json")
_S3 = Applies(ON_S3.selector, ON_S3.values, "applies to s3:// and s3a:// paths only; the source reads local paths "
              "({actual})", ON_S3.doc)


class FileSourceOptions(S3Options):
    """``sparklink.files`` as a source. Of the S3 settings, all but ``s3.allowUnconditionalWrites``
    (the source never writes)."""

    exclude = ("s3.allowUnconditionalWrites",)
    path = Option("path", string("a directory, a file, or `s3://bucket/prefix` / `s3a://...`"), default_doc="required",
                  builder="FileSource.for_*_format(fmt, *paths)", example="/data/in",
                  doc="a directory (read recursively) or a file; or an S3 prefix or object "
                      "([On S3](#on-s3-s3-s3a))")
    paths = Option("paths", string("a JSON list"), builder="FileSource.for_*_format(fmt, *paths)",
                   example='["/a", "/b"]', doc="several roots (all local, or all S3)")
    format = Option("format", choice(*FORMATS), required=True, example="parquet",
                    builder="for_record_stream_format / for_bulk_file_format", doc="the files' format")
    max_files_per_trigger = Option("maxFilesPerTrigger", integer(1), example="100",
                                   doc="at most this many files per micro-batch (at least one)")
    max_bytes_per_trigger = Option("maxBytesPerTrigger", SIZE, example="1GB",
                                   doc="at most this many bytes of files per micro-batch (at least one file)")
    min_file_age = Option("minFileAge", DURATION, default=DEFAULT_MIN_FILE_AGE, default_doc="`1s`", example="30s",
                          doc="a file is read only once it has not changed for this long (stability check)")
    max_file_age = Option("maxFileAge", DURATION, example="7d",
                          doc="on the first start, skip files that arrived longer ago than this")
    path_glob_filter = Option("pathGlobFilter", string("a glob"), example="*.csv", doc="only file names matching the glob")
    monitor_interval = Option("monitorInterval", DURATION, default_doc="every trigger", example="10s",
                              builder="monitor_continuously(interval)", doc="list the directory at most this often")
    bounded = Option("bounded", BOOL, default=False, example="true", builder="build() without monitor_continuously",
                     doc="a bounded source: `spark.read` only")
    file_enumerator = Option("fileEnumerator", string("`module:ClassName`"), default_doc="directory walk",
                             example="my.module:S3Enumerator", builder="set_file_enumerator(cls)",
                             doc="custom discovery (see [Custom file enumerator](#custom-file-enumerator-flinks-fileenumerator))")
    max_split_bytes = Option("maxSplitBytes", SIZE, default=DEFAULT_MAX_SPLIT_BYTES, default_doc="`128MB`",
                             example="64MB", doc="target split size (at least 1KB)")
    min_partitions = Option("minPartitions", integer(1), default_doc="driver cores", example="8",
                            doc="cut a batch into at least this many splits when files allow")
    header = Option("header", BOOL, default=False, applies=_CSV, example="true", builder="CsvReaderFormat(header=)",
                    doc="the first line names the columns; columns are then matched to the schema **by name**")
    delimiter = Option("delimiter", string("one character (`\\t` accepted)"), default=",", aliases=("sep",),
                       applies=_CSV, example=";", builder="CsvReaderFormat(delimiter=)", doc="the field separator")
    quote = Option("quote", string("one character, or empty"), default='"', applies=_CSV, example="'",
                   builder="CsvReaderFormat(quote=)", doc="the quote character (empty: no quoting)")
    escape = Option("escape", string("one character"), applies=_CSV, example="\\\\", builder="CsvReaderFormat(escape=)",
                    default_doc="`\\` inside quotes only",
                    doc="the escape character (doubled quotes always work). Unset, as Spark's reader: `\\` escapes "
                        "only inside quoted values (`\"x\\\"y\"` is `x\"y`, `\"C:\\\\d\"` is `C:\\d`), an unquoted "
                        "`C:\\path` stays as it is. Set, the character escapes everywhere, unquoted values too "
                        "(see [CSV escapes](#csv-escapes))")
    multi_line = Option("multiLine", BOOL, default=False, applies=_CSV, example="true",
                        builder="CsvReaderFormat(multi_line=)",
                        doc="quoted values may contain newlines (files are not split)")
    infer_schema = Option("inferSchema", BOOL, default=False, applies=_PARSED, example="true",
                          builder="CsvReaderFormat / JsonLinesFormat(infer_schema=)",
                          doc="infer the schema from the first file (first 4 MB)")
    mode = Option("mode", choice(*MODES), default="PERMISSIVE", applies=_PARSED, example="FAILFAST",
                  builder="CsvReaderFormat / JsonLinesFormat(mode=)", doc="what bad records do")
    corrupt_column = Option("columnNameOfCorruptRecord", NON_EMPTY, default=DEFAULT_CORRUPT_COLUMN, applies=_PARSED,
                            example="bad", doc="PERMISSIVE: this string column (if in the schema) gets the raw record")
    ignore_corrupt_files = Option("ignoreCorruptFiles", BOOL, default=False, example="true",
                                  doc="skip truncated / corrupt files (logged) instead of failing")
    ignore_missing_files = Option("ignoreMissingFiles", BOOL, default=False, example="true",
                                  doc="skip files deleted between listing and reading")
    compression = Option("compression", choice(*COMPRESSIONS), default="auto", applies=_TEXT, example="gzip",
                         doc="the codec of text files (`auto`: by the file name's suffix)")
    batch_size = Option("batchSize", integer(1), default_doc="Parquet: from the footer; others `65536`",
                        example="8192", doc="rows per Arrow record batch. Unset, Parquet batches hold about 16 MB of "
                                            "decoded data (65,536 to 1,048,576 rows)")
    max_visibility_delay = Option("maxVisibilityDelay", DURATION, default=DEFAULT_MAX_VISIBILITY_DELAY,
                                  default_doc="`10min`", applies=_S3, example="1h",
                                  doc="the longest an object may take to appear in listings after its "
                                      "`LastModified` ([On S3](#on-s3-s3-s3a))")
    use_incremental_listing = Option("useIncrementalListing", BOOL, default=False, applies=_S3, example="true",
                                     doc="list after the keys already read and settled (`StartAfter`), for writers "
                                         "that name objects in lexical order ([On S3](#on-s3-s3-s3a))")


O = FileSourceOptions


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
        _single_char(O.delimiter.key, self.delimiter, allow_none=False)
        _single_char(O.quote.key, self.quote, allow_none=True)
        _single_char(O.escape.key, self.escape, allow_none=True)
        if self.delimiter in ("\n", "\r") or self.delimiter == self.quote:
            raise ConfigError(O.delimiter.key, f"{self.delimiter!r} cannot be the delimiter")


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
            raise ConfigError(O.batch_size.key, f"must be at least 1, got {self.batch_size}")
        if not self.paths:
            raise ConfigError(O.path.key, "is required")
        if self.format not in FORMATS:
            raise ConfigError(O.format.key, f"unknown value '{self.format}'", ", ".join(FORMATS))
        if self.mode not in MODES:
            raise ConfigError(O.mode.key, f"unknown value '{self.mode}'", ", ".join(MODES))
        if self.compression not in COMPRESSIONS:
            raise ConfigError(O.compression.key, f"unknown value '{self.compression}'", ", ".join(COMPRESSIONS))
        if self.compression not in ("auto", "none") and self.format in BULK_FORMATS:
            raise ConfigError(O.compression.key, f"applies to text formats only; {self.format} files carry "
                              "their own compression", "auto, none")
        if self.max_split_bytes < 1024:
            raise ConfigError(O.max_split_bytes.key, f"must be at least 1KB, got {self.max_split_bytes}")
        if self.file_enumerator is not None and ":" not in self.file_enumerator:
            raise ConfigError(O.file_enumerator.key, f"'{self.file_enumerator}' is not 'module:ClassName'")

    @property
    def splittable_text(self) -> bool:
        """Whether uncompressed files of this format can be cut into line-aligned byte ranges."""
        if self.format == "csv":
            return not self.csv.multi_line
        return self.format in ("text", "json")

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> "FileSourceConfig":
        """Parse and validate the user's string options (driver side, at query start)."""
        opts = O.options(options)
        paths, on_s3 = _parse_paths(opts)
        if not on_s3:
            O.check_applies(opts, ON_S3.selector, "local", shown=", ".join(paths))
        fmt = O.format.value(opts)
        delimiter = O.delimiter.value(opts)
        if delimiter == "\\t":
            delimiter = "\t"
        csv = CsvOptions(header=O.header.value(opts), delimiter=delimiter, quote=O.quote.value(opts),
                         escape=O.escape.get(opts) or None, multi_line=O.multi_line.value(opts))
        return cls(
            paths=paths,
            format=fmt,
            max_files_per_trigger=O.max_files_per_trigger.get(opts),
            max_bytes_per_trigger=O.max_bytes_per_trigger.get(opts),
            min_file_age=O.min_file_age.value(opts),
            max_file_age=O.max_file_age.get(opts),
            path_glob_filter=O.path_glob_filter.get(opts) or None,
            monitor_interval=O.monitor_interval.get(opts),
            bounded=O.bounded.value(opts),
            file_enumerator=O.file_enumerator.get(opts) or None,
            max_split_bytes=O.max_split_bytes.value(opts),
            min_partitions=O.min_partitions.get(opts),
            csv=csv,
            infer_schema=O.infer_schema.value(opts),
            mode=O.mode.value(opts),
            corrupt_column=O.corrupt_column.value(opts),
            ignore_corrupt_files=O.ignore_corrupt_files.value(opts),
            ignore_missing_files=O.ignore_missing_files.value(opts),
            compression=O.compression.value(opts),
            batch_size=O.batch_size.get(opts),
            s3=S3Config.from_options(opts) if on_s3 else None,
            max_visibility_delay=O.max_visibility_delay.value(opts),
            use_incremental_listing=O.use_incremental_listing.value(opts),
        )


def _parse_paths(opts: Options) -> tuple[tuple[str, ...], bool]:
    """The source's paths (``path`` first, then the JSON list ``paths``) and whether they are S3
    prefixes. Local paths and S3 URIs are not mixed in one source; every other scheme is
    refused (:func:`~sparklink.storage.parse_location`)."""
    path, paths = O.path.key, O.paths.key
    named: list[tuple[str, str]] = []
    if path in opts or paths not in opts:
        named.append((path, opts[path] if paths in opts else opts.require(path)))
    if paths in opts:
        try:
            decoded = json.loads(opts[paths])
        except json.JSONDecodeError:
            raise ConfigError(paths, "must be a JSON list of paths") from None
        if not isinstance(decoded, list) or not all(isinstance(p, str) and p for p in decoded):
            raise ConfigError(paths, "must be a JSON list of non-empty paths")
        named.extend((paths, p) for p in decoded)
    locations = [(option, parse_location(option, path)) for option, path in named]
    for option, location in locations:
        if isinstance(location, MemoryLocation):
            raise ConfigError(option, f"'{location.uri()}': the file source reads local paths and S3 prefixes, not a "
                              "memory store (it plans in the driver and reads in executors, other processes)")
    local = [loc.path for _, loc in locations if isinstance(loc, LocalLocation)]
    remote = [loc.uri() for _, loc in locations if not isinstance(loc, LocalLocation)]
    if local and remote:
        raise ConfigError(paths if paths in opts else path,
                          f"mixes local paths ({', '.join(local)}) and S3 prefixes ({', '.join(remote)}); one "
                          "source reads one kind: use two sources and union them")
    return (tuple(remote), True) if remote else (tuple(local), False)
