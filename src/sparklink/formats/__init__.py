"""File formats, one module per format, each with its reader and its writer: ``text``,
``csv_format``, ``json_lines`` (row formats: appended record by record) and ``parquet``,
``avro``, ``orc`` (bulk formats: self-contained files).

A layer below every connector: it imports only ``errors``, ``options`` and ``storage``.
Shared pieces: :mod:`~sparklink.formats.options` (the format names and every format option,
readers' and writers', declared once), :mod:`~sparklink.formats.base` (the suffix table, the
interfaces), :mod:`~sparklink.formats.config` (the writers' config,
:class:`~sparklink.formats.config.FormatConfig`), :mod:`~sparklink.formats.read_config` (the
readers' config, :class:`~sparklink.formats.read_config.ReadConfig`),
:mod:`~sparklink.formats.compression` (text files' codecs, line-aligned byte ranges),
:mod:`~sparklink.formats.bad_records` (Spark's parse modes), :mod:`~sparklink.formats.records`
(the text readers' record-by-record fallback). Users: the file sink and its compaction, the
file source, the Delta and Iceberg data-file writers and ``sparklink verify``.

:func:`get_format` returns the file source's reader of a format; :func:`read_table` reads a
whole file of a format. Format modules are imported on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

import pyarrow as pa

from sparklink.errors import DataError
from sparklink.formats.base import FileFormat, SegmentInput

# format name -> its module and the file source's reader class in it
_MODULES = {"text": "text", "csv": "csv_format", "json": "json_lines", "parquet": "parquet", "avro": "avro",
            "orc": "orc"}
_READERS = {"text": "TextLineFormat", "csv": "CsvFormat", "json": "JsonLinesFormat", "parquet": "ParquetFormat",
            "avro": "AvroFormat", "orc": "OrcFormat"}


def _module(name: str) -> Any:
    return importlib.import_module(f"sparklink.formats.{_MODULES[name]}")


def get_format(name: str) -> FileFormat:
    """The file source's reader of format ``name``."""
    if name not in _MODULES:
        raise ValueError(f"unknown file format '{name}'")
    reader: FileFormat = getattr(_module(name), _READERS[name])()
    return reader


def read_table(fmt: str, source: Any, name: str) -> pa.Table:
    """A whole file of format ``fmt`` as an Arrow table (``sparklink verify``). ``source`` is an
    open file (random access for the bulk formats); ``name`` names it in errors."""
    if fmt not in _MODULES:
        raise DataError(f"{name}: unknown format '{fmt}'")
    return _module(fmt).read_table(source, name)


__all__ = ["FileFormat", "SegmentInput", "get_format", "read_table"]
