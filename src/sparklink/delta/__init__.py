"""``sparklink.delta``: Delta Lake tables without JVM jars, through delta-rs (``deltalake``).

The sink (:mod:`sparklink.delta.sink`) writes Parquet data files on executors and commits one
Delta transaction per micro-batch on the driver, with the ``txn`` idempotence marker. See
docs/delta.md.
"""

from __future__ import annotations

from sparklink.contract import ConnectorSpec, FormatSpec, OptionsDoc

#: The connector contract (ARCHITECTURE.md, "Adding a connector"): read by sparklink.connectors.
CONNECTOR = ConnectorSpec(
    package="delta",
    formats=(FormatSpec(
        name="sparklink.delta",
        source="sparklink.delta.source:DeltaSource",
        source_options=OptionsDoc("sparklink.delta.source:DeltaSourceOptions", "docs/delta.md", "delta-source"),
        sink="sparklink.delta.sink:DeltaSink",
        sink_options=OptionsDoc("sparklink.delta.config:DeltaSinkOptions", "docs/delta.md", "delta-sink"),
        records_txn_itself=True,  # txnAppId / txnVersion become Delta's own txn action
    ),),
)
