"""The readers' own settings (:class:`ReadConfig`): what a format needs to read a file, and
nothing of the connector that reads it (paths, listing, triggers stay the file source's).

Built on the driver from the file source's options
(:meth:`~sparklink.files.source.config.FileSourceConfig.read_config`), pickled to executors
inside each :class:`~sparklink.formats.base.SegmentInput`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sparklink.errors import ConfigError
from sparklink.formats.options import (
    BULK_FORMATS,
    DEFAULT_BATCH_ROWS,
    DEFAULT_CORRUPT_COLUMN,
    FORMATS,
    MODES,
    TEXT_FILE_CODECS,
)
from sparklink.formats.options import FormatReadOptions as O
from sparklink.storage.s3_config import S3Config


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
class ReadConfig:
    """One format's reader settings, validated. Plain values only (it is pickled).

    ``compression`` is the codec of a whole text file (``auto``: by its suffix); ``batch_size``
    the rows per Arrow batch (None: the format sizes batches itself); ``s3`` the store's
    settings when the files are S3 objects."""

    format: str
    csv: CsvOptions = field(default_factory=CsvOptions)
    infer_schema: bool = False
    mode: str = "PERMISSIVE"
    corrupt_column: str = DEFAULT_CORRUPT_COLUMN
    compression: str = "auto"
    batch_size: int | None = None
    s3: S3Config | None = None

    def __post_init__(self) -> None:
        if self.batch_size is not None and self.batch_size < 1:
            raise ConfigError(O.batch_size.key, f"must be at least 1, got {self.batch_size}")
        if self.format not in FORMATS:
            raise ConfigError(O.format.key, f"unknown value '{self.format}'", ", ".join(FORMATS))
        if self.mode not in MODES:
            raise ConfigError(O.mode.key, f"unknown value '{self.mode}'", ", ".join(MODES))
        if self.compression not in TEXT_FILE_CODECS:
            raise ConfigError(O.compression.key, f"unknown value '{self.compression}'", ", ".join(TEXT_FILE_CODECS))
        if self.compression not in ("auto", "none") and self.format in BULK_FORMATS:
            raise ConfigError(O.compression.key, f"applies to text formats only; {self.format} files carry "
                              "their own compression", "auto, none")

    @property
    def rows_per_batch(self) -> int:
        """Rows per Arrow batch for formats that do not size batches from file metadata."""
        return self.batch_size or DEFAULT_BATCH_ROWS

    @property
    def splittable_text(self) -> bool:
        """Whether uncompressed files of this format can be cut into line-aligned byte ranges."""
        if self.format == "csv":
            return not self.csv.multi_line
        return self.format in ("text", "json")
