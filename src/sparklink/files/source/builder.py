"""PyFlink-style builders for the file source; they compile to ``sparklink.files`` options.

Driver side, pure configuration::

    from sparklink.files import FileSource
    from sparklink.files.source.builder import CsvReaderFormat

    source = (FileSource.for_record_stream_format(CsvReaderFormat(header=True), "/data/in")
              .monitor_continuously("10s")
              .build())
    df = source.read_stream(spark, schema="id long, name string")
    # the same as spark.readStream.format(source.format_name).options(**source.options).schema(...).load()

Without ``monitor_continuously`` the built source is bounded (``spark.read`` only), as in Flink.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

from sparklink.errors import ConfigError
from sparklink.files.source.config import FileSourceConfig
from sparklink.files.source.config import FileSourceOptions as O
from sparklink.files.source.listing import FileEnumerator
from sparklink.formats.options import BULK_FORMATS
from sparklink.options import parse_duration

FORMAT_NAME = "sparklink.files"


@dataclass(frozen=True, kw_only=True)
class TextLineInputFormat:
    """Record format: one string column ``value`` per line (Flink's TextLineInputFormat)."""

    def to_options(self) -> dict[str, str]:
        return {O.format.key: "text"}


@dataclass(frozen=True, kw_only=True)
class CsvReaderFormat:
    """Record format: CSV. ``mode``: PERMISSIVE | DROPMALFORMED | FAILFAST."""

    header: bool = False
    delimiter: str = ","
    quote: str = '"'
    escape: str | None = None
    multi_line: bool = False
    infer_schema: bool = False
    mode: str = "PERMISSIVE"

    def to_options(self) -> dict[str, str]:
        options = {O.format.key: "csv", O.header.key: str(self.header).lower(),
                   O.delimiter.key: self.delimiter, O.quote.key: self.quote,
                   O.multi_line.key: str(self.multi_line).lower(),
                   O.infer_schema.key: str(self.infer_schema).lower(), O.mode.key: self.mode}
        if self.escape:
            options[O.escape.key] = self.escape
        return options


@dataclass(frozen=True, kw_only=True)
class JsonLinesFormat:
    """Record format: one JSON object per line."""

    infer_schema: bool = False
    mode: str = "PERMISSIVE"

    def to_options(self) -> dict[str, str]:
        return {O.format.key: "json", O.infer_schema.key: str(self.infer_schema).lower(),
                O.mode.key: self.mode}


@dataclass(frozen=True, kw_only=True)
class BulkFormat:
    """Bulk format: ``parquet``, ``avro`` or ``orc`` (the schema comes from the files)."""

    name: str

    def __post_init__(self) -> None:
        if self.name not in BULK_FORMATS:
            raise ConfigError(O.format.key, f"'{self.name}' is not a bulk format", ", ".join(BULK_FORMATS))

    def to_options(self) -> dict[str, str]:
        return {O.format.key: self.name}


ParquetFormat = BulkFormat(name="parquet")
AvroFormat = BulkFormat(name="avro")
OrcFormat = BulkFormat(name="orc")


@dataclass(frozen=True, kw_only=True)
class BuiltFileSource:
    """The result of :meth:`FileSourceBuilder.build`: a format name and validated options."""

    format_name: str
    options: dict[str, str]
    continuous: bool

    def read(self, spark: Any, schema: Any = None):
        """``spark.read.format("sparklink.files").options(...)[.schema(...)].load()``."""
        reader = spark.read.format(self.format_name).options(**self.options)
        return (reader.schema(schema) if schema is not None else reader).load()

    def read_stream(self, spark: Any, schema: Any = None):
        """``spark.readStream...load()``; only for a source built with ``monitor_continuously``."""
        if not self.continuous:
            raise ConfigError("monitor_continuously", "the source is bounded; call .monitor_continuously(interval) "
                              "before .build() to read it as a stream")
        reader = spark.readStream.format(self.format_name).options(**self.options)
        return (reader.schema(schema) if schema is not None else reader).load()


@dataclass(frozen=True, kw_only=True)
class FileSourceBuilder:
    """Immutable builder (each ``set_*`` / ``monitor_continuously`` returns a new one)."""

    paths: tuple[str, ...]
    format_options: dict[str, str]
    extra: dict[str, str] = field(default_factory=dict)
    monitor_interval: str | None = None

    def monitor_continuously(self, interval: Any) -> "FileSourceBuilder":
        """Continuous mode: discover new files at most every ``interval`` ("10s", seconds, or a timedelta)."""
        if hasattr(interval, "total_seconds"):
            interval = interval.total_seconds()
        seconds = parse_duration("monitor_continuously", interval)
        return dataclasses.replace(self, monitor_interval=f"{seconds}s")

    # Flink's spelling in the PyFlink docs
    monitor_continously = monitor_continuously

    def set_file_enumerator(self, enumerator: type[FileEnumerator] | str) -> "FileSourceBuilder":
        """Use a custom :class:`~sparklink.files.source.listing.FileEnumerator` (a class importable
        by module path, or ``"module:ClassName"``)."""
        if isinstance(enumerator, type):
            if not issubclass(enumerator, FileEnumerator):
                raise ConfigError(O.file_enumerator.key, f"{enumerator!r} is not a FileEnumerator subclass")
            enumerator = f"{enumerator.__module__}:{enumerator.__qualname__}"
        return self.set_option(O.file_enumerator.key, enumerator)

    def set_option(self, key: str, value: Any) -> "FileSourceBuilder":
        """Any option of the file source (``maxFilesPerTrigger``, ``minFileAge``, ...)."""
        return dataclasses.replace(self, extra={**self.extra, key: str(value)})

    def build(self) -> BuiltFileSource:
        options = dict(self.format_options)
        if len(self.paths) == 1:
            options[O.path.key] = self.paths[0]
        else:
            options[O.paths.key] = json.dumps(list(self.paths))
        options.update(self.extra)
        if self.monitor_interval is not None:
            options[O.monitor_interval.key] = self.monitor_interval
        else:
            options[O.bounded.key] = "true"
        FileSourceConfig.from_options(options)  # validate now, with the option names the user will see
        return BuiltFileSource(format_name=FORMAT_NAME, options=options, continuous=self.monitor_interval is not None)


class FileSource:
    """Entry points, as in Flink: ``FileSource.for_record_stream_format(fmt, *paths)`` and
    ``FileSource.for_bulk_file_format(fmt, *paths)``."""

    @staticmethod
    def for_record_stream_format(stream_format: TextLineInputFormat | CsvReaderFormat | JsonLinesFormat,
                                 *paths: str) -> FileSourceBuilder:
        if not isinstance(stream_format, (TextLineInputFormat, CsvReaderFormat, JsonLinesFormat)):
            raise ConfigError("stream_format", f"{stream_format!r} is not a record format",
                              "TextLineInputFormat, CsvReaderFormat, JsonLinesFormat")
        return FileSource._builder(stream_format.to_options(), paths)

    @staticmethod
    def for_bulk_file_format(bulk_format: BulkFormat | str, *paths: str) -> FileSourceBuilder:
        if isinstance(bulk_format, str):
            bulk_format = BulkFormat(name=bulk_format)
        if not isinstance(bulk_format, BulkFormat):
            raise ConfigError("bulk_format", f"{bulk_format!r} is not a bulk format", "ParquetFormat, AvroFormat, OrcFormat")
        return FileSource._builder(bulk_format.to_options(), paths)

    @staticmethod
    def _builder(format_options: dict[str, str], paths: tuple[str, ...]) -> FileSourceBuilder:
        if not paths:
            raise ConfigError(O.path.key, "at least one path is required")
        return FileSourceBuilder(paths=tuple(str(p) for p in paths), format_options=format_options)
