"""Registration of the ``sparklink.files`` format: the file source and the file sink."""

from __future__ import annotations


def data_sources() -> list[type]:
    from sparklink.files.sink.connector import FileSinkConnector
    from sparklink.files.source.connector import FileSourceConnector
    from sparklink.spark import as_data_source

    return [as_data_source(FileSourceConnector, "sparklink.files", sink=FileSinkConnector)]
