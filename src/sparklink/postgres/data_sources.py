"""Registration of the ``sparklink.postgres`` format."""

from __future__ import annotations


def data_sources() -> list[type]:
    from sparklink.postgres.connector import PostgresSinkConnector, PostgresSourceConnector
    from sparklink.spark import as_data_source

    return [as_data_source(PostgresSourceConnector, "sparklink.postgres", sink=PostgresSinkConnector)]
