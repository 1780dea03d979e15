"""Every option of the file formats, for readers and writers, declared here once (driver side,
at query start), with the facts they rest on: the format names, the codecs, the parse modes and
the batch sizes.

Readers (:class:`FormatReadOptions`: ``format``, ``header``, ``delimiter``, ``inferSchema``,
``mode``, ``compression``, ``batchSize``, ...) are set by the file source, whose table
(:class:`~sparklink.files.source.config.FileSourceOptions`) includes these specs; their values
make a :class:`~sparklink.formats.read_config.ReadConfig`. Writers (:class:`FormatWriteOptions`:
``format``, ``compression``, ``rowGroupSize``, ``writeBufferSize``, ``header``) are set by the
file sink (:class:`~sparklink.files.sink.options.FileSinkOptions` includes them); their values
make a :class:`~sparklink.formats.config.FormatConfig`.

A key both directions take is declared once (``format``, ``header``: one parser, one place they
apply) and documented for each direction. ``compression`` names two different things and so has
two specs side by side: reading, the codec of a whole text file (:data:`TEXT_FILE_CODECS`);
writing, the codec inside a bulk file (:data:`BULK_CODECS`).
"""

from __future__ import annotations

import dataclasses
import re

from sparklink.errors import ConfigError
from sparklink.options import (
    BOOL,
    NON_EMPTY,
    SIZE,
    Option,
    OptionTable,
    applies_to_option,
    choice,
    custom,
    integer,
    parse_size,
    string,
)

ROW_FORMATS = ("text", "json", "csv")  # appended record by record
BULK_FORMATS = ("parquet", "avro", "orc")  # self-contained files
FORMATS = ROW_FORMATS + BULK_FORMATS
MODES = ("PERMISSIVE", "DROPMALFORMED", "FAILFAST")  # Spark's parse modes for malformed records

# reading: the codec of a whole text file (`auto`: by the file name's suffix)
TEXT_FILE_CODECS = ("auto", "none", "gzip", "zstd")
# writing: the codecs inside a bulk file, and each format's default (Spark's)
BULK_CODECS = {
    "parquet": ("snappy", "zstd", "gzip", "lz4", "brotli", "none"),
    "orc": ("snappy", "zstd", "zlib", "lz4", "none"),
    "avro": ("null", "deflate", "bzip2", "xz", "snappy", "zstandard"),
}
DEFAULT_BULK_CODEC = {"parquet": "snappy", "orc": "snappy", "avro": "deflate"}
# Spark's own defaults: parquet.block.size, orc.stripe.size, Avro's DataFileWriter sync interval.
DEFAULT_ROW_GROUP_BYTES = {"parquet": 128 * 1024 * 1024, "orc": 64 * 1024 * 1024, "avro": 64_000}

DEFAULT_BATCH_ROWS = 65536            # rows per Arrow batch of the row formats when batchSize is not set
BATCH_TARGET_BYTES = 16 * 1024 * 1024  # Parquet without batchSize: batches of about this many decoded bytes
MAX_AUTO_BATCH_ROWS = 1024 * 1024     # ... but at most this many rows
DEFAULT_CORRUPT_COLUMN = "_corrupt_record"
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


_CSV = applies_to_option("format", "csv")
_TEXT = applies_to_option("format", *ROW_FORMATS)
_PARSED = applies_to_option("format", "csv", "json")

# the keys both directions take: one parser and one place they apply each, documented per direction
_FORMAT = Option("format", choice(*FORMATS), doc="the files' format")
_HEADER = Option("header", BOOL, default=False, applies=_CSV, example="true",
                 doc="csv: a header line names the columns")


class FormatReadOptions(OptionTable):
    """The readers' format settings (the file source's)."""

    format = dataclasses.replace(_FORMAT, required=True, example="parquet",
                                 builder="for_record_stream_format / for_bulk_file_format")
    header = dataclasses.replace(_HEADER, builder="CsvReaderFormat(header=)").documented(
        "the first line names the columns; columns are then matched to the schema **by name**")
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
    compression = Option("compression", choice(*TEXT_FILE_CODECS), default="auto", applies=_TEXT, example="gzip",
                         doc="the codec of text files (`auto`: by the file name's suffix)")
    batch_size = Option("batchSize", integer(1), default_doc="Parquet: from the footer; others `65536`",
                        example="8192", doc="rows per Arrow record batch. Unset, Parquet batches hold about 16 MB of "
                                            "decoded data (65,536 to 1,048,576 rows)")


class FormatWriteOptions(OptionTable):
    """The writers' format settings (the file sink's)."""

    format = dataclasses.replace(_FORMAT, default="parquet", example="json",
                                 builder="FileSink.for_row_format / for_bulk_format(format=)")
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
    header = dataclasses.replace(_HEADER, builder="FileSink.for_row_format(header=)").documented(
        "write a header line at the start of each file")
