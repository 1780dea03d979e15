"""PostgreSQL connectors: upsert, two-phase-commit, write-ahead and at-least-once sinks; a
table source; asynchronous lookups."""

from __future__ import annotations

from sparklink.contract import ConnectorSpec, FormatSpec, OptionsDoc

#: The connector contract (ARCHITECTURE.md, "Adding a connector"): read by sparklink.connectors.
CONNECTOR = ConnectorSpec(
    package="postgres",
    formats=(
        FormatSpec(
            name="sparklink.postgres",
            source="sparklink.postgres.connector:PostgresSourceConnector",
            source_options=OptionsDoc("sparklink.postgres.table_source:PostgresSourceOptions", "docs/postgres.md",
                                      "postgres-source"),
            sink="sparklink.postgres.connector:PostgresSinkConnector",
            sink_options=OptionsDoc("sparklink.postgres.sink_config:PostgresSinkOptions", "docs/postgres.md",
                                    "postgres-sink"),
        ),
        FormatSpec(
            name="sparklink.postgres-cdc",
            source="sparklink.postgres.cdc_source:PostgresCdcSource",
            source_options=OptionsDoc("sparklink.postgres.cdc_config:PostgresCdcOptions", "docs/postgres-cdc.md",
                                      "postgres-cdc"),
        ),
    ),
)
