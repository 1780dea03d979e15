"""``sparklink.iceberg``: an exactly-once Apache Iceberg sink on pyiceberg (no JVM jars).

Executors write Parquet data files under the table's location; the driver commits one
snapshot per micro-batch (or ``df.write`` job) whose summary names the writer, and finds what
is already committed by walking the ancestry of the table's current snapshot. See
docs/iceberg.md.
"""

from __future__ import annotations

from sparklink.contract import ConnectorSpec, FormatSpec, OptionsDoc

#: The connector contract (ARCHITECTURE.md, "Adding a connector"): read by sparklink.connectors.
CONNECTOR = ConnectorSpec(
    package="iceberg",
    formats=(FormatSpec(
        name="sparklink.iceberg",
        source="sparklink.iceberg.source:IcebergSource",
        source_options=OptionsDoc("sparklink.iceberg.source:IcebergSourceOptions", "docs/iceberg.md", "iceberg-source"),
        sink="sparklink.iceberg.sink:IcebergSink",
        sink_options=OptionsDoc("sparklink.iceberg.sink_config:IcebergSinkOptions", "docs/iceberg.md", "iceberg-sink"),
        records_txn_itself=True,  # txnAppId / txnVersion go into the snapshot summary (identity.find_txn)
    ),),
)
