"""The format options of the file sink's writers (driver side, at query start): ``format``,
``compression``, ``rowGroupSize``, ``writeBufferSize`` and ``header``, declared once.

:class:`~sparklink.formats.config.FormatConfig` holds their values; the file sink's table
(:class:`~sparklink.files.sink.options.FileSinkOptions`) includes these specs. The file source's
reader options (``header``, ``delimiter``, ``inferSchema``, ...) are the source's own
(:mod:`sparklink.files.source.config`).
"""

from __future__ import annotations

import re

from sparklink.errors import ConfigError
from sparklink.formats.base import BULK_FORMATS, FORMATS
from sparklink.options import BOOL, SIZE, Option, OptionTable, applies_to_option, choice, custom, parse_size, string

DEFAULT_WRITE_BUFFER_SIZE = 256 * 1024 * 1024
_ROWS = re.compile(r"^\s*(\d+)\s*rows?\s*$", re.IGNORECASE)
_ROW_GROUP_SIZE = "rowGroupSize"


def parse_row_group_size(value: str | int) -> tuple[int | None, int | None]:
    """``rowGroupSize`` -> (bytes, rows): ``"128MB"`` or a bare number is bytes, ``"1000000rows"`` rows."""
    match = _ROWS.match(str(value))
    if match:
        return None, int(match.group(1))
    try:
        return parse_size(_ROW_GROUP_SIZE, value), None
    except ConfigError:
        raise ConfigError(_ROW_GROUP_SIZE, f"'{value}' is not a size or a number of rows",
                          "bytes with an optional unit (128MB) or rows (1000000rows)") from None


class FormatOptions(OptionTable):
    """The writers' format settings."""

    format = Option("format", choice(*FORMATS), default="parquet", example="json",
                    builder="FileSink.for_row_format / for_bulk_format(format=)", doc="the files' format")
    compression = Option("compression", string("a codec of the format"), example="zstd",
                         applies=applies_to_option("format", *BULK_FORMATS, doc="`format` `parquet`, `orc`, `avro`"),
                         builder="FileSink.for_bulk_format(compression=)",
                         default_doc="parquet, orc: `snappy`; avro: `deflate`",
                         doc="parquet: `snappy`, `zstd`, `gzip`, `lz4`, `brotli`, `none`. orc: `snappy`, `zstd`, "
                             "`zlib`, `lz4`, `none`. avro: `deflate`, `null`, `bzip2`, `xz`, plus `snappy` and "
                             "`zstandard` when `cramjam` or `zstandard` is installed")
    row_group_size = Option(_ROW_GROUP_SIZE, custom(lambda key, value: parse_row_group_size(value),
                                                    "size, or rows (`1000000rows`, parquet)"),
                            applies=applies_to_option("format", "parquet", "orc", "avro"), example="128MB",
                            builder="FileSink.for_bulk_format(row_group_size=)",
                            default_doc="parquet: `128MB`; orc: `64MB`; avro: `64000`",
                            doc="parquet: a row group's size, in bytes (parquet-mr's `parquet.block.size`) or rows. "
                                "orc: the stripe size (`orc.stripe.size`). avro: the block size (Avro's sync "
                                "interval). A bare number is bytes")
    write_buffer_size = Option("writeBufferSize", SIZE, default=DEFAULT_WRITE_BUFFER_SIZE, default_doc="`256MB`",
                               applies=applies_to_option("format", *BULK_FORMATS), example="64MB",
                               doc="the most Arrow bytes one write task buffers for all its open files together; see "
                                   "[File sizes and memory](#file-sizes-and-memory)")
    header = Option("header", BOOL, default=False, applies=applies_to_option("format", "csv"), example="true",
                    builder="FileSink.for_row_format(header=)", doc="write a header line at the start of each file")
