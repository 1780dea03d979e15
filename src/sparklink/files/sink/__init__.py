"""The file sink (Flink's FileSink on Spark): see ``docs/file-sink.md`` and ``connector.py``."""
