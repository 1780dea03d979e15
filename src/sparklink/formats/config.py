"""The writers' format settings (driver side): :class:`FormatConfig`, the writer config of the
file sink, its compaction and the Delta and Iceberg data files, built from the ``format``,
``compression``, ``rowGroupSize``, ``writeBufferSize`` and ``header`` options and validated
against the input schema there; on executors it hands out the format module's row encoder or
bulk writer, and compaction reads bulk files back through :func:`read_bulk_batches`.

Bulk files are sized the way Spark's writers size them, whatever the size of the Arrow batches
Spark hands over (``spark.sql.execution.arrow.maxRecordsPerBatch`` rows, 10,000 by default): a
Parquet row group is written once the rows buffered for it reach ``rowGroupSize`` (128 MiB by
default, parquet-mr's ``parquet.block.size``), an ORC stripe once pyarrow's ORC writer holds
``rowGroupSize`` bytes (64 MiB, ``orc.stripe.size``), an Avro block once fastavro holds
``rowGroupSize`` bytes (64,000, Avro's sync interval).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import pyarrow as pa

from sparklink.errors import ConfigError, DataError
from sparklink.formats import avro, csv_format, json_lines, orc, parquet, text
from sparklink.formats.base import EXTENSIONS, BulkWriter, RowEncoder
from sparklink.formats.options import (
    BULK_CODECS,
    BULK_FORMATS,
    DEFAULT_BULK_CODEC,
    DEFAULT_ROW_GROUP_BYTES,
    DEFAULT_WRITE_BUFFER_SIZE,
    FORMATS,
)
from sparklink.formats.options import FormatWriteOptions as O

FORMAT, COMPRESSION, ROW_GROUP_SIZE = O.format.key, O.compression.key, O.row_group_size.key


@dataclass(frozen=True, kw_only=True)
class FormatConfig:
    """Which format, and its settings.

    ``row_group_bytes`` / ``row_group_rows`` (at most one; neither: the format's default bytes)
    size Parquet row groups, ORC stripes (bytes only) and Avro blocks (bytes only).
    ``write_buffer_size`` bounds the Arrow bytes one write task buffers for all its open bulk
    files together.
    """

    name: str
    compression: str | None = None
    row_group_bytes: int | None = None
    row_group_rows: int | None = None
    write_buffer_size: int = DEFAULT_WRITE_BUFFER_SIZE
    header: bool = False
    #: Parquet only, no option of its own: a table format's write property (Iceberg's
    #: ``write.parquet.compression-level``); None is the codec's default
    compression_level: int | None = None

    def __post_init__(self) -> None:
        if self.name not in FORMATS:
            raise ConfigError(FORMAT, f"unknown format '{self.name}'", ", ".join(FORMATS))
        if self.compression is not None:
            allowed = BULK_CODECS.get(self.name)
            if allowed is None:
                raise ConfigError(COMPRESSION, f"format '{self.name}' is written uncompressed",
                                  "compression applies to " + ", ".join(BULK_CODECS))
            if self.compression not in allowed:
                raise ConfigError(COMPRESSION, f"'{self.compression}' is not a {self.name} codec", ", ".join(allowed))
        if self.row_group_bytes is not None and self.row_group_rows is not None:
            raise ConfigError(ROW_GROUP_SIZE, "is either bytes or rows, not both")
        if (self.row_group_bytes is not None or self.row_group_rows is not None) and not self.bulk:
            raise O.row_group_size.inapplicable(self.name)
        for value in (self.row_group_bytes, self.row_group_rows):
            if value is not None and value < 1:
                raise ConfigError(ROW_GROUP_SIZE, f"must be at least 1, got {value}")
        if self.row_group_rows is not None and self.name != "parquet":
            raise ConfigError(ROW_GROUP_SIZE, f"rows apply to format 'parquet'; {self.name} "
                              f"{'stripes' if self.name == 'orc' else 'blocks'} are sized in bytes", "e.g. 64MB")
        if self.write_buffer_size < 1:
            raise ConfigError(O.write_buffer_size.key, f"must be at least 1 byte, got {self.write_buffer_size}")
        if self.name == "avro" and self.codec in ("snappy", "zstandard"):
            avro.check_codec(self.codec)

    @property
    def bulk(self) -> bool:
        return self.name in BULK_FORMATS

    @property
    def codec(self) -> str:
        return self.compression or DEFAULT_BULK_CODEC.get(self.name, "none")

    @property
    def extension(self) -> str:
        return EXTENSIONS[self.name]

    @property
    def block_bytes(self) -> int | None:
        """Bytes per row group / stripe / block (None when Parquet row groups count rows)."""
        if self.row_group_rows is not None:
            return None
        return self.row_group_bytes if self.row_group_bytes is not None else DEFAULT_ROW_GROUP_BYTES.get(self.name)

    def validate(self, schema: pa.Schema) -> None:
        """Check that the input schema can be written in this format (driver, query start)."""
        if self.name == "text":
            if len(schema) != 1 or not pa.types.is_string(schema.field(0).type):
                raise ConfigError(FORMAT, f"format 'text' writes one string column; the input has "
                                  f"{', '.join(f'{f.name}: {f.type}' for f in schema)}",
                                  "select a single string column, e.g. df.selectExpr('to_json(struct(*)) AS value')")
        elif self.name == "csv":
            for field in schema:
                if pa.types.is_nested(field.type) or pa.types.is_binary(field.type):
                    raise ConfigError(FORMAT, f"format 'csv' cannot write column '{field.name}' of type {field.type}",
                                      "flat columns (strings, numbers, booleans, dates, timestamps)")
        elif self.name == "avro":
            avro.avro_schema(schema)

    def row_encoder(self, schema: pa.Schema) -> RowEncoder:
        if self.name == "text":
            return text.TextEncoder()
        if self.name == "json":
            return json_lines.JsonLinesEncoder(schema)
        if self.name == "csv":
            return csv_format.CsvEncoder(header=self.header, schema=schema)
        raise ConfigError(FORMAT, f"format '{self.name}' is a bulk format, not a row format")

    def bulk_writer(self, path: Path | BinaryIO, schema: pa.Schema) -> BulkWriter:
        """A writer of a new bulk file at ``path`` (local disk), or into ``path`` when it is a
        binary file object (an S3 multipart upload: closing the writer closes the object)."""
        if self.name == "parquet":
            return parquet.ParquetBulkWriter(path, schema, self.codec, row_group_bytes=self.block_bytes,
                                             row_group_rows=self.row_group_rows,
                                             compression_level=self.compression_level)
        if self.name == "orc":
            return orc.OrcBulkWriter(path, schema, self.codec, stripe_bytes=self.block_bytes or 0)
        if self.name == "avro":
            return avro.AvroBulkWriter(path, schema, self.codec, block_bytes=self.block_bytes or 0)
        raise ConfigError(FORMAT, f"format '{self.name}' is a row format, not a bulk format")

    def to_options(self) -> dict[str, str]:
        options = {FORMAT: self.name}
        if self.compression is not None:
            options[COMPRESSION] = self.compression
        if self.row_group_bytes is not None:
            options[ROW_GROUP_SIZE] = str(self.row_group_bytes)
        if self.row_group_rows is not None:
            options[ROW_GROUP_SIZE] = f"{self.row_group_rows}rows"
        if self.write_buffer_size != DEFAULT_WRITE_BUFFER_SIZE:
            options[O.write_buffer_size.key] = str(self.write_buffer_size)
        if self.name == "csv":
            options[O.header.key] = str(self.header).lower()
        return options


# ---------------------------------------------------------------------------------- reading back


def read_bulk_batches(config: FormatConfig, source: Any, *,
                      name: str) -> Iterator[pa.RecordBatch] | Iterator[dict[str, Any]]:
    """Records of a bulk file: Arrow batches (Parquet, ORC) or dicts (Avro). Used by compaction.
    ``source`` is an open random-access file (a local file or an S3 object); ``name`` names it
    in errors."""
    try:
        if config.name == "parquet":
            yield from parquet.file_batches(source)
        elif config.name == "orc":
            yield from orc.read_batches(source)
        elif config.name == "avro":
            yield from avro.read_records(source)
        else:
            raise ConfigError(FORMAT, f"format '{config.name}' is not a bulk format")
    except (pa.ArrowInvalid, OSError, ValueError) as exc:
        raise DataError(f"{name}: cannot read {config.name} part file: {exc}") from exc
