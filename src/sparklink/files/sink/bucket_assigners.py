"""Bucket assigners (Flink's BucketAssigner): which sub-directory of the base path a row goes to.

Built on the driver from options (``bucketAssigner``, ``bucketColumn``, ``bucketFormat``,
``bucketTimezone``, ``bucketHiveStyle``) or by the builder, pickled to executors, where
:meth:`BucketAssigner.split` runs once per Arrow record batch. Assignment is vectorised
(pyarrow compute); only the distinct bucket values of a batch are handled in Python, except
for a custom callable, which is called once per row.

Rows whose bucket value is null go to :data:`NULL_BUCKET` (``col=__HIVE_DEFAULT_PARTITION__``
for Hive-style column buckets, which Spark reads back as null). Column values are escaped
as Hive does (``%2F`` for ``/`` ...), so they can never leave the base path or hide files.
A bucket id from a pattern or a custom callable that would leave the base path (absolute,
``..``) or hide its files from readers (a segment starting with ``.`` or ``_``) is refused.
"""

from __future__ import annotations

import dataclasses
import re
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparklink.errors import ConfigError, DataError
from sparklink.files.sink.options import (
    ASSIGNER_BASEPATH,
    ASSIGNER_COLUMN,
    ASSIGNER_CUSTOM,
    ASSIGNER_DATETIME,
    DEFAULT_BUCKET_FORMAT,
    DEFAULT_TIMEZONE,
)
from sparklink.files.sink.options import FileSinkOptions as O
from sparklink.formats.partitioning import HIVE_NULL, escape_path_name, split_by_key

BUCKET_ASSIGNER, BUCKET_COLUMN, BUCKET_FORMAT = O.bucket_assigner.key, O.bucket_column.key, O.bucket_format.key
FLINK_BUCKET_FORMAT = "yyyy-MM-dd--HH"  # Flink's default: a plain directory, which Spark's log readers skip
NULL_BUCKET = "null"
MAX_NAME_BYTES = 255  # NAME_MAX of ext4, xfs, btrfs, tmpfs: the longest name of one directory entry

# Java DateTimeFormatter letters we translate to strftime (pattern letter, count) -> directive
_JAVA_FIELDS = {
    ("y", 4): "%Y", ("y", 2): "%y", ("u", 4): "%Y", ("M", 2): "%m", ("M", 3): "%b", ("d", 2): "%d",
    ("H", 2): "%H", ("m", 2): "%M", ("s", 2): "%S", ("D", 3): "%j", ("E", 3): "%a", ("w", 2): "%V",
}


def java_pattern_to_strftime(pattern: str, option: str = BUCKET_FORMAT) -> str:
    """Translate a ``DateTimeFormatter`` pattern (``yyyy-MM-dd--HH``) to strftime."""
    out: list[str] = []
    i = 0
    while i < len(pattern):
        char = pattern[i]
        if char == "'":
            end = pattern.find("'", i + 1)
            if end < 0:
                raise ConfigError(option, f"'{pattern}' has an unclosed quote")
            literal = pattern[i + 1:end] or "'"
            out.append(literal.replace("%", "%%"))
            i = end + 1
        elif char.isalpha():
            run = i
            while run < len(pattern) and pattern[run] == char:
                run += 1
            directive = _JAVA_FIELDS.get((char, run - i))
            if directive is None:
                raise ConfigError(option, f"'{pattern}': '{pattern[i:run]}' is not supported",
                                  "yyyy, yy, MM, MMM, dd, HH, mm, ss, DDD, EEE, ww and 'quoted text'")
            out.append(directive)
            i = run
        else:
            out.append("%%" if char == "%" else char)
            i += 1
    return "".join(out)


def check_bucket_id(bucket: str, origin: str) -> str:
    """Refuse bucket ids that leave the base path or hide their files; return ``bucket``."""
    if not isinstance(bucket, str):
        raise DataError(f"{origin}: bucket id {bucket!r} is not a string")
    if bucket == "":
        return bucket
    if bucket.startswith("/") or bucket.startswith("\\") or re.match(r"^[A-Za-z]:", bucket) or "\x00" in bucket:
        raise DataError(f"{origin}: bucket id '{bucket}' is an absolute path; it must stay under the base path")
    for segment in bucket.split("/"):
        if segment in ("", ".", ".."):
            raise DataError(f"{origin}: bucket id '{bucket}' has an empty, '.' or '..' segment; "
                            "it must stay under the base path")
        if segment[0] in "._":
            raise DataError(f"{origin}: bucket id '{bucket}' has a segment starting with '.' or '_'; "
                            "readers would skip its files")
        if len(segment.encode("utf-8")) > MAX_NAME_BYTES:
            raise DataError(f"{origin}: bucket id segment '{segment[:40]}...' is {len(segment.encode('utf-8'))} "
                            f"bytes long; the limit is {MAX_NAME_BYTES} bytes per directory name")
    return bucket


def is_hive_style(bucket: str) -> bool:
    """Whether Spark's readers take ``bucket``'s files: the base path itself (``""``), or only
    ``key=value`` segments, from which they derive partition columns. Through ``_spark_metadata``
    Spark reads nothing below a plain directory (``2026-11-18--11``) and says nothing."""
    return bucket == "" or all("=" in segment and not segment.startswith("=") for segment in bucket.split("/"))


def refuse_unreadable_layout(assigner: "BucketAssigner") -> "BucketAssigner":
    """Driver side, at query start, while Spark's log is written: refuse a bucket layout whose
    files Spark's readers would skip; a custom assigner (unknown until it runs) is wrapped so
    that every bucket id it returns is checked on the executors."""
    fix = "set sparkMetadata=false to keep a layout Spark's readers cannot partition on"
    if isinstance(assigner, DateTimeBucketAssigner):
        sample = assigner.sample_bucket()
        if not is_hive_style(sample):
            raise ConfigError(BUCKET_FORMAT, f"'{assigner.format}' names directories such as '{sample}', whose "
                              "files Spark's readers skip silently (only Hive-style key=value directories are read "
                              f"through _spark_metadata); use a Hive-style pattern, or {fix}",
                              f"e.g. {DEFAULT_BUCKET_FORMAT} (the default) or 'date='yyyy-MM-dd")
        return assigner
    if isinstance(assigner, ColumnBucketAssigner):
        if not assigner.hive_style:
            raise ConfigError(O.bucket_hive_style.key, f"false names directories by the bare value of column "
                              f"'{assigner.column}', whose files Spark's readers skip silently (only Hive-style "
                              f"{assigner.column}=value directories are read through _spark_metadata); {fix}",
                              "true (the default)")
        return assigner
    if isinstance(assigner, BasePathBucketAssigner):
        return assigner
    return HiveStyleCheckedAssigner(inner=assigner)


class BucketAssigner(ABC):
    """Assigns rows to buckets (executor side, once per record batch)."""

    name: str = ""

    def validate(self, schema: pa.Schema) -> None:
        """Check the assigner against the input schema (driver side, at query start)."""

    @abstractmethod
    def split(self, batch: pa.RecordBatch, now: float) -> list[tuple[str, pa.RecordBatch]]:
        """``(bucket id, rows)`` pairs covering ``batch``; ``now`` is the processing time (s)."""

    def to_options(self) -> dict[str, str]:
        return {BUCKET_ASSIGNER: self.name}


@dataclass(frozen=True, kw_only=True)
class BasePathBucketAssigner(BucketAssigner):
    """Every row in the base path itself (one global bucket)."""

    name = ASSIGNER_BASEPATH

    def split(self, batch: pa.RecordBatch, now: float) -> list[tuple[str, pa.RecordBatch]]:
        return [("", batch)]


@dataclass(frozen=True, kw_only=True)
class DateTimeBucketAssigner(BucketAssigner):
    """Buckets named by a date-time pattern (default ``'dt='yyyy-MM-dd/'hour='HH``, hourly,
    Hive-style) in ``timezone``; Flink's ``yyyy-MM-dd--HH`` when asked for.

    The time is the ``column`` value (event time: timestamp, date, or epoch milliseconds) or,
    without a column, the processing time of the record batch. A null time goes to
    :data:`NULL_BUCKET`, or, for a Hive-style pattern, to ``key=__HIVE_DEFAULT_PARTITION__`` in
    each segment (which Spark reads back as null).
    """

    format: str = DEFAULT_BUCKET_FORMAT
    timezone: str = DEFAULT_TIMEZONE
    column: str | None = None
    name = ASSIGNER_DATETIME

    def __post_init__(self) -> None:
        strftime = java_pattern_to_strftime(self.format)
        object.__setattr__(self, "_strftime", strftime)
        # the pattern's finest field, in microseconds (Arrow's %S prints the fraction too: every value is its own unit)
        unit = None if "%S" in strftime else 60_000_000 if "%M" in strftime else 3_600_000_000
        object.__setattr__(self, "_unit_us", unit)
        try:
            pa.scalar(0, pa.timestamp("us", tz=self.timezone)).cast(pa.string())
            pc.strftime(pa.array([0], pa.timestamp("us", tz=self.timezone)), format="%H")
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError) as exc:
            raise ConfigError(O.bucket_timezone.key, f"'{self.timezone}' is not a known time zone ({exc})",
                              "an IANA zone such as UTC, Europe/Paris, or an offset such as +02:00") from None
        sample = pc.strftime(pa.array([0], pa.timestamp("us", tz=self.timezone)), format=strftime)[0].as_py()
        try:
            check_bucket_id(sample, f"option '{BUCKET_FORMAT}'")
        except DataError as exc:
            raise ConfigError(BUCKET_FORMAT, str(exc)) from None
        null_bucket = NULL_BUCKET
        if is_hive_style(sample):
            null_bucket = "/".join(f"{segment.split('=', 1)[0]}={HIVE_NULL}" for segment in sample.split("/"))
        object.__setattr__(self, "_null_bucket", null_bucket)

    def sample_bucket(self) -> str:
        """The bucket of the epoch in this pattern and zone: the layout's shape (driver side)."""
        stamp = pa.array([0], pa.timestamp("us", tz=self.timezone))
        return pc.strftime(stamp, format=self._strftime)[0].as_py()  # type: ignore[attr-defined]

    def with_format(self, fmt: str) -> "DateTimeBucketAssigner":
        return dataclasses.replace(self, format=fmt)

    def with_timezone(self, timezone: str) -> "DateTimeBucketAssigner":
        return dataclasses.replace(self, timezone=timezone)

    def with_column(self, column: str | None) -> "DateTimeBucketAssigner":
        return dataclasses.replace(self, column=column)

    def validate(self, schema: pa.Schema) -> None:
        if self.column is None:
            return
        if self.column not in schema.names:
            raise ConfigError(BUCKET_COLUMN, f"column '{self.column}' is not in the input", ", ".join(schema.names))
        kind = schema.field(self.column).type
        if not (pa.types.is_timestamp(kind) or pa.types.is_date(kind) or pa.types.is_integer(kind)):
            raise ConfigError(BUCKET_COLUMN, f"column '{self.column}' has type {kind}; the datetime assigner "
                              "needs event time", "a timestamp, date or epoch-milliseconds (integer) column")

    def _as_zoned(self, values: pa.Array) -> pa.Array:
        target = pa.timestamp("us", tz=self.timezone)
        kind = values.type
        if pa.types.is_timestamp(kind):
            if kind.tz is None:  # wall-clock time (TimestampNTZ): format as it is
                return values.cast(pa.timestamp("us"))
            return values.cast(target)
        if pa.types.is_date(kind):
            return values.cast(pa.timestamp("us"))
        return pc.multiply(values.cast(pa.int64()), 1000).cast(target)

    def _keys(self, values: pa.Array) -> pa.Array:
        """The pattern's text of every value (``timestamp[us]``, zoned or not; null stays null).

        Formatted once per distinct time unit (the pattern's finest field: an hour or a minute)
        and spread to the unit's rows wherever the zone's offset is the same at both ends of the
        unit and a whole number of units, so that every instant of the unit has the same local
        unit; value by value elsewhere (a daylight-saving change inside the unit, a +05:30 zone
        under an hourly pattern) and for a pattern with seconds. The keys are those of
        formatting every value, which costs about 0.6 µs a value (executor side)."""
        strftime = self._strftime  # type: ignore[attr-defined]
        unit = self._unit_us  # type: ignore[attr-defined]
        if unit is None:
            return pc.strftime(values, format=strftime)
        raw = np.frombuffer(values.buffers()[1], dtype=np.int64, count=values.offset + len(values))[values.offset:]
        nulls = values.is_null().to_numpy(zero_copy_only=False) if values.null_count else None
        starts = pa.array(raw - raw % unit, pa.int64(), mask=nulls)  # the unit each value falls in (floored)
        distinct = pc.unique(starts).drop_null()
        if len(distinct) == 0:
            return pa.nulls(len(values), pa.string())
        bounds = [value for start in distinct.to_pylist() for value in (start, start + unit - 1)]
        if values.type.tz is None:
            offsets = [0] * len(bounds)
        else:
            instants = pa.array(bounds, pa.int64())
            local = pc.local_timestamp(instants.view(values.type)).view(pa.int64())
            offsets = pc.subtract(local, instants).to_pylist()
        uniform = [offsets[2 * i] == offsets[2 * i + 1] and offsets[2 * i] % unit == 0 for i in range(len(distinct))]
        keys = pc.take(pc.strftime(distinct.view(values.type), format=strftime), pc.index_in(starts, value_set=distinct))
        if all(uniform):
            return keys
        uneven = pc.is_in(starts, value_set=pc.filter(distinct, pa.array([not even for even in uniform])))  # null: false
        rows = pc.indices_nonzero(uneven)
        return pc.replace_with_mask(keys, uneven, pc.strftime(pc.take(values, rows), format=strftime))

    def split(self, batch: pa.RecordBatch, now: float) -> list[tuple[str, pa.RecordBatch]]:
        strftime = self._strftime  # type: ignore[attr-defined]
        if self.column is None:
            stamp = pa.array([int(now * 1_000_000)], pa.timestamp("us", tz=self.timezone))
            return [(pc.strftime(stamp, format=strftime)[0].as_py(), batch)]
        keys = self._keys(self._as_zoned(batch.column(self.column)))

        null_bucket = self._null_bucket  # type: ignore[attr-defined]

        def to_bucket(value: str | None) -> str:
            if value is None:
                return null_bucket
            return check_bucket_id(value, f"datetime bucket of column '{self.column}'")

        return split_by_key(batch, keys, to_bucket)

    def to_options(self) -> dict[str, str]:
        options = {BUCKET_ASSIGNER: self.name, BUCKET_FORMAT: self.format,
                   O.bucket_timezone.key: self.timezone}
        if self.column is not None:
            options[BUCKET_COLUMN] = self.column
        return options


@dataclass(frozen=True, kw_only=True)
class ColumnBucketAssigner(BucketAssigner):
    """A bucket per value of ``column``: Hive-style ``column=value`` (default), or ``value``."""

    column: str
    hive_style: bool = True
    name = ASSIGNER_COLUMN

    def __post_init__(self) -> None:
        if not self.column:
            raise ConfigError(BUCKET_COLUMN, "the column assigner needs a column")

    def validate(self, schema: pa.Schema) -> None:
        if self.column not in schema.names:
            raise ConfigError(BUCKET_COLUMN, f"column '{self.column}' is not in the input", ", ".join(schema.names))
        kind = schema.field(self.column).type
        if pa.types.is_nested(kind) or pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
            raise ConfigError(BUCKET_COLUMN, f"column '{self.column}' has type {kind}, which cannot name a "
                              "directory", "a string, number, boolean, date or timestamp column")

    def _bucket(self, value: str | None) -> str:
        if self.hive_style:
            bucket = f"{escape_path_name(self.column)}={HIVE_NULL if value is None or value == '' else escape_path_name(value)}"
        elif value is None or value == "":
            return NULL_BUCKET
        else:
            bucket = escape_path_name(value)
        size = len(bucket.encode("utf-8"))
        if size > MAX_NAME_BYTES:
            shown = value or ""
            raise DataError(f"bucketColumn '{self.column}': value '{shown[:40]}...' ({len(shown)} characters) would "
                            f"name a bucket directory of {size} bytes; the limit is {MAX_NAME_BYTES} bytes per "
                            "directory name (NAME_MAX of local file systems). Nothing of this task is committed: "
                            "bucket by a shorter column or a hash of it")
        return bucket

    def split(self, batch: pa.RecordBatch, now: float) -> list[tuple[str, pa.RecordBatch]]:
        values = batch.column(self.column)
        keys = values if pa.types.is_string(values.type) else values.cast(pa.string())
        return split_by_key(batch, keys, self._bucket)

    def to_options(self) -> dict[str, str]:
        return {BUCKET_ASSIGNER: self.name, BUCKET_COLUMN: self.column,
                O.bucket_hive_style.key: str(self.hive_style).lower()}


@dataclass(frozen=True, kw_only=True)
class CallableBucketAssigner(BucketAssigner):
    """A user function ``row (dict) -> bucket id`` (called once per row, on executors).

    A None result means :data:`NULL_BUCKET`; any other result is checked with
    :func:`check_bucket_id`.
    """

    function: Callable[[dict[str, Any]], str | None]
    name = ASSIGNER_CUSTOM

    def split(self, batch: pa.RecordBatch, now: float) -> list[tuple[str, pa.RecordBatch]]:
        buckets = []
        for row in batch.to_pylist():
            value = self.function(row)
            buckets.append(NULL_BUCKET if value is None else check_bucket_id(value, "custom bucket assigner"))
        return split_by_key(batch, pa.array(buckets, pa.string()), lambda v: v)


@dataclass(frozen=True, kw_only=True)
class HiveStyleCheckedAssigner(BucketAssigner):
    """A custom assigner whose bucket ids must be Hive-style (``key=value`` segments), because
    Spark's ``_spark_metadata`` readers would skip any other directory without a word. Checked
    on the executors, once per bucket of each record batch; a bad id fails the task."""

    inner: BucketAssigner
    name = ASSIGNER_CUSTOM

    def validate(self, schema: pa.Schema) -> None:
        self.inner.validate(schema)

    def split(self, batch: pa.RecordBatch, now: float) -> list[tuple[str, pa.RecordBatch]]:
        pairs = self.inner.split(batch, now)
        for bucket, _ in pairs:
            if not is_hive_style(bucket):
                raise DataError(f"custom bucket assigner: bucket id '{bucket}' is not Hive-style (key=value "
                                f"segments): Spark's readers would skip its files silently through _spark_metadata; "
                                f"return ids such as 'kind=a/day=2026-11-18' (see option '{BUCKET_FORMAT}'), "
                                "or set sparkMetadata=false")
        return pairs
