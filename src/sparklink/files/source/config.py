"""The file source's options: keys, defaults and the validated configuration object.

Parsed on the driver when a query starts (every option is checked there, so a bad value fails
before any file is read); the resulting :class:`FileSourceConfig` is pickled to executors
with the source.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property

from sparklink.errors import ConfigError
from sparklink.formats.options import DEFAULT_CORRUPT_COLUMN, FormatReadOptions
from sparklink.formats.read_config import CsvOptions, ReadConfig
from sparklink.options import (
    BOOL,
    DURATION,
    SIZE,
    Applies,
    Option,
    Options,
    integer,
    string,
)
from sparklink.storage.location import Location, parse_location, parse_one_store
from sparklink.storage.s3_config import ON_S3, S3Config, S3Options, settings_for

DEFAULT_MIN_FILE_AGE = 1.0
DEFAULT_MAX_SPLIT_BYTES = 128 * 1024 * 1024
DEFAULT_MAX_VISIBILITY_DELAY = 600.0  # S3: an object appears in listings within 10 min of its LastModified
_S3 = Applies(ON_S3.selector, ON_S3.values, "applies to s3:// and s3a:// paths only; the source reads local paths "
              "({actual})", ON_S3.doc)
F = FormatReadOptions  # the readers' format options: declared once, in sparklink.formats.options


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
    format = F.format
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
    header = F.header
    delimiter = F.delimiter
    quote = F.quote
    escape = F.escape
    multi_line = F.multi_line
    infer_schema = F.infer_schema
    mode = F.mode
    corrupt_column = F.corrupt_column
    ignore_corrupt_files = Option("ignoreCorruptFiles", BOOL, default=False, example="true",
                                  doc="skip truncated / corrupt files (logged) instead of failing")
    ignore_missing_files = Option("ignoreMissingFiles", BOOL, default=False, example="true",
                                  doc="skip files deleted between listing and reading")
    compression = F.compression
    batch_size = F.batch_size
    max_visibility_delay = Option("maxVisibilityDelay", DURATION, default=DEFAULT_MAX_VISIBILITY_DELAY,
                                  default_doc="`10min`", applies=_S3, example="1h",
                                  doc="the longest an object may take to appear in listings after its "
                                      "`LastModified` ([On S3](#on-s3-s3-s3a))")
    use_incremental_listing = Option("useIncrementalListing", BOOL, default=False, applies=_S3, example="true",
                                     doc="list after the keys already read and settled (`StartAfter`), for writers "
                                         "that name objects in lexical order ([On S3](#on-s3-s3-s3a))")


O = FileSourceOptions


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

    @cached_property
    def store(self) -> Location:
        """The first path's location, which answers for the store every path is on (one store:
        :func:`_parse_paths`): how it is listed (``KEY_LISTING``) and read (``READ_AHEAD``)."""
        return parse_location(O.path.key, self.paths[0])

    def read_config(self) -> ReadConfig:
        """The readers' settings: what the format needs of this source's options."""
        return ReadConfig(format=self.format, csv=self.csv, infer_schema=self.infer_schema, mode=self.mode,
                          corrupt_column=self.corrupt_column, compression=self.compression,
                          batch_size=self.batch_size, s3=self.s3)

    @property
    def rows_per_batch(self) -> int:
        """Rows per Arrow batch for formats that do not size batches from file metadata."""
        return self.read_config().rows_per_batch

    def __post_init__(self) -> None:
        if not self.paths:
            raise ConfigError(O.path.key, "is required")
        self.read_config()  # the format settings are checked where they are declared (sparklink.formats)
        if self.max_split_bytes < 1024:
            raise ConfigError(O.max_split_bytes.key, f"must be at least 1KB, got {self.max_split_bytes}")
        if self.file_enumerator is not None and ":" not in self.file_enumerator:
            raise ConfigError(O.file_enumerator.key, f"'{self.file_enumerator}' is not 'module:ClassName'")

    @property
    def splittable_text(self) -> bool:
        """Whether uncompressed files of this format can be cut into line-aligned byte ranges."""
        return self.read_config().splittable_text

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> "FileSourceConfig":
        """Parse and validate the user's string options (driver side, at query start)."""
        opts = O.options(options)
        locations = _parse_paths(opts)
        paths = tuple(location.uri() for location in locations)
        s3 = settings_for(locations[0], opts, O, shown=", ".join(paths))  # the seam's answer: None for local paths
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
            s3=s3,
            max_visibility_delay=O.max_visibility_delay.value(opts),
            use_incremental_listing=O.use_incremental_listing.value(opts),
        )


def _parse_paths(opts: Options) -> tuple[Location, ...]:
    """The source's paths (``path`` first, then the JSON list ``paths``), parsed by the storage
    seam: one store for all of them (local paths or S3 prefixes), every other scheme and a
    memory store refused (:func:`~sparklink.storage.location.parse_one_store`)."""
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
    return parse_one_store(named, reader="the file source", option=paths if paths in opts else path)
