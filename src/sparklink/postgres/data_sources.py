"""Registration of the ``sparklink.postgres`` and ``sparklink.postgres-cdc`` formats."""

from __future__ import annotations


def data_sources() -> list[type]:
    from sparklink.postgres.cdc_source import PostgresCdcSource
    from sparklink.postgres.connector import PostgresSinkConnector, PostgresSourceConnector
    from sparklink.spark import as_data_source

    return [as_data_source(PostgresSourceConnector, "sparklink.postgres", sink=PostgresSinkConnector),
            as_data_source(PostgresCdcSource, "sparklink.postgres-cdc")]
