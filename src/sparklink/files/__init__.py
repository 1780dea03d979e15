"""Flink's file connectors on Spark: the file sink (``sparklink.files`` writes) and the file
source (``sparklink.files`` reads), with PyFlink-style builders.

Builders are imported lazily so that importing ``sparklink.files`` stays cheap.
"""

from __future__ import annotations

import importlib
from typing import Any

from sparklink.contract import ConnectorSpec, FormatSpec, OptionsDoc

_EXPORTS = {
    # file sink (files/sink/)
    "FileSink": "sparklink.files.sink.builder",
    "DateTimeBucketAssigner": "sparklink.files.sink.bucket_assigners",
    "BasePathBucketAssigner": "sparklink.files.sink.bucket_assigners",
    "ColumnBucketAssigner": "sparklink.files.sink.bucket_assigners",
    "DefaultRollingPolicy": "sparklink.files.sink.rolling_policies",
    "OnCheckpointRollingPolicy": "sparklink.files.sink.rolling_policies",
    "OutputFileConfig": "sparklink.files.sink.output_file_config",
    "FileCompactStrategy": "sparklink.files.sink.compaction",
    # the Spark-facing finish is the Spark adapter's (it finds the drivers); its work is files/sink/finish.py.
    # A name, resolved when asked for: files/ imports nothing of spark/ (ARCHITECTURE.md, "Layers")
    "finish": "sparklink.spark.finish",
    # file source (files/source/)
    "FileSource": "sparklink.files.source.builder",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module_name = _EXPORTS.get(name)
    if module_name is None:
        raise AttributeError(f"module 'sparklink.files' has no attribute '{name}'")
    return getattr(importlib.import_module(module_name), name)

#: The connector contract (ARCHITECTURE.md, "Adding a connector"): read by sparklink.connectors.
CONNECTOR = ConnectorSpec(
    package="files",
    formats=(FormatSpec(
        name="sparklink.files",
        source="sparklink.files.source.connector:FileSourceConnector",
        source_options=OptionsDoc("sparklink.files.source.config:FileSourceOptions", "docs/file-source.md", "file-source"),
        sink="sparklink.files.sink.connector:FileSinkConnector",
        sink_options=OptionsDoc("sparklink.files.sink.options:FileSinkOptions", "docs/file-sink.md", "file-sink"),
    ),),
    end_of_input={"files.finish": "sparklink.files.sink.finish:end_of_input"},
)
