"""Example connectors built on the SDK, used by the tests and the README.

* ``sparklink.sequence``: a source of ``numSplits`` splits, each ``rowsPerSplit`` ids long.
* ``sparklink.directory``: a transactional directory sink writing Parquet files.
"""
