"""``sparklink.iceberg``: an exactly-once Apache Iceberg sink on pyiceberg (no JVM jars).

Executors write Parquet data files under the table's location; the driver commits one
snapshot per micro-batch (or ``df.write`` job) whose summary names the writer, and finds what
is already committed by walking the ancestry of the table's current snapshot. See
docs/iceberg.md.
"""
