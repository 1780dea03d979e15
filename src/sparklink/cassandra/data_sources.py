"""Registration of the ``sparklink.cassandra`` format (a sink only)."""

from __future__ import annotations


def data_sources() -> list[type]:
    from sparklink.cassandra.sink import CassandraSinkConnector
    from sparklink.spark import as_data_source

    return [as_data_source(None, "sparklink.cassandra", sink=CassandraSinkConnector)]
