"""Registration of the ``sparklink.iceberg`` format (the source and the sink; driver side)."""

from __future__ import annotations


def data_sources() -> list[type]:
    from sparklink.iceberg.sink import IcebergSink
    from sparklink.iceberg.source import IcebergSource
    from sparklink.spark import as_data_source

    return [as_data_source(IcebergSource, "sparklink.iceberg", sink=IcebergSink)]
