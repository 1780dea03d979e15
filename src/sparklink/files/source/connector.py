"""``sparklink.files`` as a source: Flink's FileSource on Spark, bounded and continuous.

``FileSourceConnector(options)`` is built on the driver for every read and micro-batch (Spark
creates a new DataSource instance each time) and validates every option there; it is pickled
to executors, where it only creates readers. See docs/file-source.md for the options.
"""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.sql.types import StringType, StructField, StructType

from sparklink.errors import ConfigError, DataError
from sparklink.files.source.config import FileSourceConfig
from sparklink.files.source.enumerator import FileSplitEnumerator
from sparklink.files.source.listing import list_sorted
from sparklink.files.source.listing_choice import load_enumerator
from sparklink.files.source.partitions import infer_partition_fields
from sparklink.files.source.reader import FileSourceReader
from sparklink.files.source.schema import spark_schema_from_arrow
from sparklink.formats import get_format
from sparklink.source import READ_ALL, Boundedness, ReadLimit, Source


class FileSourceConnector(Source):
    """The file source: options -> enumerator (driver) and readers (executors)."""

    def __init__(self, options: Mapping[str, str] | None = None):
        super().__init__(options)
        self.config = FileSourceConfig.from_options(self.options)
        load_enumerator(self.config.file_enumerator)  # a bad hook fails at query start

    @property
    def boundedness(self) -> Boundedness:
        return Boundedness.BOUNDED if self.config.bounded else Boundedness.CONTINUOUS_UNBOUNDED

    def schema(self) -> StructType:
        """Driver side, when the user gives no schema: from the first file's metadata (Parquet,
        Avro, ORC), or its contents for CSV / JSON with ``inferSchema``; plus partition columns."""
        config = self.config
        if config.format in ("csv", "json") and not config.infer_schema:
            raise ConfigError("schema", f"format '{config.format}' needs a schema: pass .schema(...) or set "
                              "inferSchema=true")
        try:
            enumerator = load_enumerator(config.file_enumerator, config)
            files = list_sorted(enumerator, config.paths, config.path_glob_filter)
        except DataError as exc:
            raise ConfigError("path", str(exc)) from None
        partition_fields = infer_partition_fields(f.partition for f in files)
        if config.format == "text":
            data = StructType([StructField("value", StringType(), True)])
        else:
            sample = next((f for f in files if f.size > 0), None)
            if sample is None:
                raise ConfigError("schema", f"cannot infer a schema: no non-empty {config.format} file under "
                                  f"{', '.join(config.paths)}; pass .schema(...)")
            data = spark_schema_from_arrow(get_format(config.format).infer_schema(sample.path, config.read_config()), sample.path)
        names = set(data.fieldNames())
        fields = list(data.fields) + [f for f in partition_fields if f.name not in names]
        return StructType(fields)

    def create_enumerator(self, *, streaming: bool) -> FileSplitEnumerator:
        return FileSplitEnumerator(self.config, streaming=streaming)

    def create_reader(self, schema: StructType) -> FileSourceReader:
        return FileSourceReader(self.config, schema)

    def default_read_limit(self) -> ReadLimit:
        if self.config.max_files_per_trigger is None and self.config.max_bytes_per_trigger is None:
            return READ_ALL
        return ReadLimit(max_files=self.config.max_files_per_trigger, max_bytes=self.config.max_bytes_per_trigger)
