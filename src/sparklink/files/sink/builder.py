"""PyFlink-style builders for the file sink; they compile to ``sparklink.files`` options.

::

    from sparklink.files import FileSink, DefaultRollingPolicy, OutputFileConfig

    sink = (FileSink.for_row_format("/data/out", "json")
            .with_rolling_policy(DefaultRollingPolicy.builder().with_max_part_size(64 << 20).build())
            .with_output_file_config(OutputFileConfig(part_prefix="events", part_suffix=".jsonl"))
            .build())
    query = sink.configure(df.writeStream).option("checkpointLocation", ck).start()
    sink.configure(df.write).save()          # the same sink as a batch job

Built on the user's driver; nothing here runs on executors (the options do).
"""

from __future__ import annotations

import base64
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sparklink.errors import ConfigError
from sparklink.files.sink.bucket_assigners import BucketAssigner
from sparklink.files.sink.compaction import FileCompactStrategy
from sparklink.files.sink.connector import FileSinkConfig
from sparklink.files.sink.options import ASSIGNER_CUSTOM
from sparklink.files.sink.options import FileSinkOptions as O
from sparklink.files.sink.output_file_config import OutputFileConfig
from sparklink.files.sink.rolling_policies import OnCheckpointRollingPolicy, RollingPolicy
from sparklink.formats.config import FormatConfig
from sparklink.formats.options import BULK_FORMATS, ROW_FORMATS, parse_row_group_size

FORMAT_NAME = "sparklink.files"


@dataclass(frozen=True, kw_only=True)
class FileSink:
    """A built file sink: the options of ``sparklink.files``, checked as the connector will."""

    options: dict[str, str]

    def __post_init__(self) -> None:
        FileSinkConfig.from_options(self.options)

    @staticmethod
    def for_row_format(base_path: str, format: str = "json", *, header: bool | None = None) -> "FileSinkBuilder":
        """A builder for text, JSON lines or CSV (``header`` for CSV)."""
        if format not in ROW_FORMATS:
            raise ConfigError(O.format.key, f"'{format}' is not a row format", ", ".join(ROW_FORMATS))
        return FileSinkBuilder(path=base_path, format=FormatConfig(name=format, header=bool(header)))

    @staticmethod
    def for_bulk_format(base_path: str, format: str = "parquet", *, compression: str | None = None,
                        row_group_size: int | str | None = None) -> "FileSinkBuilder":
        """A builder for Parquet, Avro or ORC (they roll at every micro-batch). ``row_group_size``
        as the ``rowGroupSize`` option: bytes (``128 << 20``, ``"128MB"``) or rows (``"100000rows"``)."""
        if format not in BULK_FORMATS:
            raise ConfigError(O.format.key, f"'{format}' is not a bulk format", ", ".join(BULK_FORMATS))
        extra: dict[str, Any] = {}
        if row_group_size is not None:
            extra["row_group_bytes"], extra["row_group_rows"] = parse_row_group_size(row_group_size)
        return FileSinkBuilder(path=base_path, format=FormatConfig(name=format, compression=compression, **extra),
                               rolling_policy=OnCheckpointRollingPolicy())

    def configure(self, writer: Any) -> Any:
        """Set format and options on a ``DataStreamWriter`` (``df.writeStream``) or a
        ``DataFrameWriter`` (``df.write``) and return it."""
        return writer.format(FORMAT_NAME).options(**self.options)


@dataclass(frozen=True, kw_only=True)
class FileSinkBuilder:
    path: str
    format: FormatConfig
    assigner: BucketAssigner | Callable[[dict[str, Any]], str | None] | None = None
    rolling_policy: RollingPolicy | None = None
    output: OutputFileConfig = field(default_factory=OutputFileConfig)
    compaction: FileCompactStrategy | None = None

    def with_bucket_assigner(self, assigner: BucketAssigner | Callable[[dict[str, Any]], str | None]) -> "FileSinkBuilder":
        """A built-in assigner, or any ``row (dict) -> bucket id`` callable (runs per row on executors)."""
        if not isinstance(assigner, BucketAssigner) and not callable(assigner):
            raise ConfigError(O.bucket_assigner.key, f"{assigner!r} is neither a BucketAssigner nor a callable")
        return dataclasses.replace(self, assigner=assigner)

    def with_rolling_policy(self, policy: RollingPolicy) -> "FileSinkBuilder":
        return dataclasses.replace(self, rolling_policy=policy)

    def with_output_file_config(self, config: OutputFileConfig) -> "FileSinkBuilder":
        return dataclasses.replace(self, output=config)

    def enable_compaction(self, strategy: FileCompactStrategy) -> "FileSinkBuilder":
        return dataclasses.replace(self, compaction=strategy)

    def disable_compaction(self) -> "FileSinkBuilder":
        return dataclasses.replace(self, compaction=None)

    def build(self) -> FileSink:
        options = {O.path.key: self.path, **self.format.to_options(), **self.output.to_options()}
        if isinstance(self.assigner, BucketAssigner) and self.assigner.name != ASSIGNER_CUSTOM:
            options.update(self.assigner.to_options())
        elif self.assigner is not None:
            from pyspark import cloudpickle

            options[O.bucket_assigner.key] = ASSIGNER_CUSTOM
            options[O.bucket_assigner_callable.key] = base64.b64encode(cloudpickle.dumps(self.assigner)).decode("ascii")
        if self.rolling_policy is not None:
            options.update(self.rolling_policy.to_options())
        if self.compaction is not None:
            options.update(self.compaction.to_options())
        return FileSink(options=options)
