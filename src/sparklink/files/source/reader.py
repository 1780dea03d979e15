"""The file source's reader (Flink's SourceReader): reads a split's file segments on an executor.

Created inside a Spark task, once per split. For every batch a format yields it conforms the
data columns to the query's schema (drift fails with both files named), adds the partition
columns and the corrupt-record column, and yields a ``pyarrow.RecordBatch`` whose schema is
exactly Spark's. Missing and corrupt files are reported (or skipped with ``ignoreMissingFiles``
/ ``ignoreCorruptFiles``). A split's small S3 objects are fetched ahead of the one being decoded,
and large ORC and Avro ones read in blocks ahead of the decoder
(:mod:`~sparklink.files.source.prefetch`, which states the memory bounds; large Parquet objects
are fetched by pyarrow a row group at a time, :mod:`sparklink.formats.parquet`).
"""

from __future__ import annotations

import logging
import zlib
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql.types import StructType

from sparklink.errors import ConfigError, DataError, StorageError
from sparklink.files.source.config import FileSourceConfig
from sparklink.files.source.partitions import partition_column
from sparklink.files.source.prefetch import SMALL_OBJECT_BYTES, ObjectPrefetch, ReadAhead
from sparklink.files.source.schema import arrow_schema_of, conform
from sparklink.files.source.splits import Segment
from sparklink.formats import SegmentInput, get_format
from sparklink.source import SourceReader, Split
from sparklink.storage.file_input import serving

log = logging.getLogger(__name__)

# what the libraries raise for a damaged file: pyarrow (ArrowException, OSError), gzip/zstd
# streams (OSError, zlib.error), fastavro (ValueError, EOFError, struct/schema errors)
AWS_ERROR_MARK = "AWS Error"  # in the message of every error pyarrow's S3 file system raises
CORRUPT_FILE_ERRORS = (pa.ArrowException, OSError, EOFError, ValueError, zlib.error, KeyError, IndexError)


class FileSourceReader(SourceReader):
    """Executor side: one instance per task."""

    def __init__(self, config: FileSourceConfig, schema: StructType):
        self.config = config
        self.schema = schema
        self.arrow_schema = arrow_schema_of(schema)
        self.format = get_format(config.format)
        self.read_config = config.read_config()  # what the format is given: its own settings only
        self.read_ahead = config.store.READ_AHEAD  # the store's answer: reads are requests, fetch ahead
        self._reference_schema: pa.Schema | None = None
        names = set(self.arrow_schema.names)
        if config.format == "text":
            extra = [f.name for f in self.arrow_schema if f.name != "value"]
            if "value" not in names:
                raise ConfigError("schema", "format 'text' yields one string column 'value'; the schema has none")
            self._text_extra = extra

    def read(self, split: Split) -> Iterator[pa.RecordBatch]:
        schema_file = split.state.get("schema_file")
        segments = [Segment.from_state(state) for state in split.state["segments"]]
        prefetch = self._prefetch(segments)
        try:
            for index, segment in enumerate(segments):
                source = self._source(segment, index, prefetch)
                if source is None:
                    yield from self._read_segment(segment, schema_file)
                    continue
                with serving(segment.path, source):
                    yield from self._read_segment(segment, schema_file)
        finally:
            if prefetch is not None:
                prefetch.close()

    def _small_object(self, segment: Segment) -> bool:
        """A whole object of a store read ahead (S3), small enough to be fetched whole ahead of
        the reader."""
        return self.read_ahead and segment.unit == "file" and segment.size <= SMALL_OBJECT_BYTES

    def _prefetch(self, segments: list[Segment]) -> ObjectPrefetch | None:
        """Small whole objects are fetched ahead of the reader (:mod:`.prefetch`)."""
        wanted = [(index, segment.path, segment.size) for index, segment in enumerate(segments)
                  if self._small_object(segment)]
        return ObjectPrefetch(self.config.s3, wanted) if wanted else None

    def _source(self, segment: Segment, index: int, prefetch: ObjectPrefetch | None) -> Any:
        """How the segment's object is served: its prefetched bytes, a read-ahead for a large
        object of a format that decodes as it reads (ORC, Avro), or None (local files; a small
        object whose prefetch failed, which the format then opens itself; a large text segment,
        which its format fetches whole in one ranged GET before decoding it; a large Parquet
        object, whose row groups pyarrow fetches itself, one at a time, in coalesced ranged GETs:
        measured cheaper in CPU, the client's and the store's, than the read-ahead's blocks)."""
        if not self.read_ahead:
            return None
        if self._small_object(segment):
            return None if prefetch is None else prefetch.take(index)
        return ReadAhead() if self.format.reads_through_read_ahead else None

    def _corrupt_column(self) -> str | None:
        if (self.config.mode == "PERMISSIVE" and self.config.format in ("csv", "json", "text")
                and self.config.corrupt_column in self.arrow_schema.names):
            return self.config.corrupt_column
        return None

    def _read_segment(self, segment: Segment, schema_file: str | None) -> Iterator[pa.RecordBatch]:
        partition = dict(segment.partition)
        corrupt = self._corrupt_column()
        not_data = {self.config.corrupt_column} if self.config.format in ("csv", "json", "text") else set()
        data_fields = [f for f in self.arrow_schema if f.name not in partition and f.name not in not_data]
        if self.config.format == "text":
            data_fields = [f for f in data_fields if f.name == "value"]
        data_schema = pa.schema([f.with_nullable(True) for f in data_fields])
        source = SegmentInput(segment=segment, data_schema=data_schema, corrupt_column=corrupt, config=self.read_config,
                              schema_file=schema_file)
        try:
            for batch in self.format.read(source):
                yield self._finish(batch, segment, partition, data_schema, corrupt, schema_file)
        except (DataError, StorageError):
            raise  # a store that fails to answer is not a corrupt file: the task fails (Spark retries it)
        except FileNotFoundError:
            if not self.config.ignore_missing_files:
                raise DataError(f"{segment.path}: the file was listed but is gone (deleted before it was read); "
                                "set ignoreMissingFiles=true to skip such files") from None
            log.warning("skipping %s: deleted between listing and reading", segment.path)
        except CORRUPT_FILE_ERRORS as exc:
            if AWS_ERROR_MARK in str(exc):  # pyarrow's S3 file system's errors (OSErrors): a store's, not the file's
                raise StorageError(f"{segment.path}: reading the object failed: {exc}") from exc
            if not self.config.ignore_corrupt_files:
                raise DataError(f"{segment.path}: corrupt or truncated {self.config.format} file: {exc} "
                                "(set ignoreCorruptFiles=true to skip such files)") from exc
            log.warning("skipping corrupt %s file %s: %s", self.config.format, segment.path, exc)

    def _reference(self, schema_file: str | None):
        def lookup(column: str) -> tuple[str | None, pa.DataType | None]:
            if not schema_file:
                return None, None
            if self._reference_schema is None:
                try:
                    self._reference_schema = self.format.infer_schema(schema_file, self.read_config)
                except (FileNotFoundError, *CORRUPT_FILE_ERRORS):
                    return None, None  # the first file is gone or unreadable: name only this file
            if column not in self._reference_schema.names:
                return None, None
            return schema_file, self._reference_schema.field(column).type
        return lookup

    def _finish(self, batch: pa.RecordBatch, segment: Segment, partition: dict, data_schema: pa.Schema,
                corrupt: str | None, schema_file: str | None) -> pa.RecordBatch:
        data = conform(batch, data_schema, path=segment.path, reference=self._reference(schema_file))
        by_name = dict(zip(data_schema.names, data, strict=False))
        rows = batch.num_rows
        arrays = []
        for field in self.arrow_schema:
            if field.name in by_name:
                arrays.append(by_name[field.name])
            elif field.name in partition:
                arrays.append(partition_column(partition[field.name], field.type, rows, column=field.name,
                                               path=segment.path))
            elif field.name == corrupt:
                arrays.append(batch.column(corrupt))
            else:
                arrays.append(pa.nulls(rows, field.type))
        return pa.RecordBatch.from_arrays(arrays, schema=self.arrow_schema)
