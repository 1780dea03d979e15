"""``sparklink.delta``: Delta Lake tables without JVM jars, through delta-rs (``deltalake``).

The sink (:mod:`sparklink.delta.sink`) writes Parquet data files on executors and commits one
Delta transaction per micro-batch on the driver, with the ``txn`` idempotence marker. See
docs/delta.md.
"""
