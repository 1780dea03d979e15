"""File formats of the file source: each turns one file segment into Arrow record batches.

Record (stream) formats: ``text``, ``csv``, ``json`` (lines). Bulk formats: ``parquet``,
``avro``, ``orc``. :func:`get_format` returns the format for an option value.
"""

from __future__ import annotations

from sparklink.files.source.formats.base import FileFormat, SegmentInput


def get_format(name: str) -> FileFormat:
    if name == "text":
        from sparklink.files.source.formats.text import TextLineFormat
        return TextLineFormat()
    if name == "csv":
        from sparklink.files.source.formats.csv_format import CsvFormat
        return CsvFormat()
    if name == "json":
        from sparklink.files.source.formats.json_lines import JsonLinesFormat
        return JsonLinesFormat()
    if name == "parquet":
        from sparklink.files.source.formats.parquet import ParquetFormat
        return ParquetFormat()
    if name == "avro":
        from sparklink.files.source.formats.avro import AvroFormat
        return AvroFormat()
    if name == "orc":
        from sparklink.files.source.formats.orc import OrcFormat
        return OrcFormat()
    raise ValueError(f"unknown file format '{name}'")


__all__ = ["FileFormat", "SegmentInput", "get_format"]
