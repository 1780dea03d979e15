"""The file sink's recorded output schema, and what a query with another schema may do
(driver side, when the sink is built; ``sparklink verify`` on the files).

The schema every file of an output is written with is recorded in ``_sparklink/sink.json``
(see :func:`sparklink.files.sink.finish.record_sink`, version 1: ``{"v": 1, "schema": <Spark
StructType JSON>, "options": ...}``). A query (or ``df.write``) that starts on an output whose
recorded schema differs from its own is refused before anything is written, naming each
changed column: a second schema in one output makes Spark's readers fail on some files
(``FAILED_READ_FILE``) or read them wrongly (CSV columns by position).

The one change accepted is the one Delta's ``mergeSchema`` accepts on append: new nullable
columns at the end, with option ``mergeSchema=true``; the new schema is then recorded, and
older files read those columns as null (Spark: ``option("mergeSchema", "true")`` or an explicit
schema). The nullability of an existing column is not compared: Spark reads every file column
as nullable. Field metadata is not compared either.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from sparklink.errors import ConfigError
from sparklink.files.sink.layout import SINK_RECORD, OutputLayout
from sparklink.files.sink.options import FileSinkOptions
from sparklink.storage.base import FileStorage
from sparklink.storage.directory import StorageDirectory

#: formats whose files carry their own schema, which ``verify`` compares with the recorded one
TYPED_FORMATS = ("parquet", "orc")


@dataclass(frozen=True, kw_only=True)
class SchemaChange:
    """How a new schema differs from the recorded one (column names as Spark shows them)."""

    added: tuple[tuple[str, str, bool], ...] = ()     # (name, type, nullable)
    removed: tuple[tuple[str, str], ...] = ()          # (name, type)
    retyped: tuple[tuple[str, str, str], ...] = ()     # (name, recorded type, new type)
    reordered: bool = False

    @property
    def none(self) -> bool:
        return not (self.added or self.removed or self.retyped or self.reordered)

    @property
    def mergeable(self) -> bool:
        """Only nullable columns added after the recorded ones."""
        return bool(self.added) and not (self.removed or self.retyped or self.reordered) \
            and all(nullable for _, _, nullable in self.added)

    def describe(self) -> str:
        parts = [f"column '{name}' changed type from {old} to {new}" for name, old, new in self.retyped]
        parts += [f"column '{name}' ({kind}) is missing" for name, kind in self.removed]
        parts += [f"column '{name}' ({kind}{'' if nullable else ', not null'}) is new"
                  for name, kind, nullable in self.added]
        if self.reordered:
            parts.append("the columns are in another order")
        return "; ".join(parts)


def schema_change(recorded: Any, new: Any) -> SchemaChange:
    """Compare two Spark ``StructType``s by column name, type (``simpleString``) and order."""
    old_fields = {f.name: f for f in recorded.fields}
    new_fields = {f.name: f for f in new.fields}
    retyped = tuple((f.name, old_fields[f.name].dataType.simpleString(), f.dataType.simpleString())
                    for f in new.fields
                    if f.name in old_fields and old_fields[f.name].dataType.simpleString() != f.dataType.simpleString())
    removed = tuple((f.name, f.dataType.simpleString()) for f in recorded.fields if f.name not in new_fields)
    added = tuple((f.name, f.dataType.simpleString(), f.nullable) for f in new.fields if f.name not in old_fields)
    common_old = [f.name for f in recorded.fields if f.name in new_fields]
    common_new = [f.name for f in new.fields if f.name in old_fields]
    # added columns must come after every recorded one (CSV and text read by position)
    reordered = common_old != common_new or [f.name for f in new.fields][:len(common_new)] != common_new
    return SchemaChange(added=added, removed=removed, retyped=retyped, reordered=reordered)


def recorded_schema(meta: StorageDirectory) -> Any | None:
    """The Spark ``StructType`` of ``_sparklink/sink.json`` in the output's ``_sparklink``
    directory ``meta``, on any storage (None: no output recorded yet)."""
    from pyspark.sql.types import StructType

    stored = meta.read(SINK_RECORD)
    if stored is None:
        return None
    record_path = _where(meta)
    try:
        record = json.loads(stored.data)
    except json.JSONDecodeError as exc:
        raise ConfigError("path", f"{record_path} is damaged ({exc}); it records the output's schema") from None
    if record.get("v") != 1 or "schema" not in record:
        raise ConfigError("path", f"{record_path}: version {record.get('v')!r} is not supported")
    return StructType.fromJson(record["schema"])


def check_output_schema(record_path: StorageDirectory, schema: Any, *, merge_schema: bool,
                        output: str) -> None:
    """Driver side, before the sink records its schema: refuse a schema that differs from the
    output's recorded one, unless it only adds nullable columns and ``mergeSchema=true``."""
    recorded = recorded_schema(record_path)
    if recorded is None:
        return
    change = schema_change(recorded, schema)
    if change.none or (merge_schema and change.mergeable):
        return
    if change.mergeable:
        fix = ("set option mergeSchema=true to add these nullable columns (older files read them as null), "
               "or write to another path")
    else:
        fix = ("only new nullable columns at the end are accepted (with mergeSchema=true); cast the columns back "
               "to the recorded types, or write to another path")
    raise ConfigError(FileSinkOptions.merge_schema.key if change.mergeable else "path",
                      f"the query's schema differs from the one output {output} was written with "
                      f"(recorded in {_where(record_path)}): {change.describe()}. {fix}")


def _where(meta: StorageDirectory) -> str:
    """Where the sink record is, for a message (a local path or a storage URI)."""
    return meta.uri(SINK_RECORD)


def _arrow_kind(data_type: Any) -> str:
    """An Arrow type as compared by ``verify``: timestamps by kind only (units and zones vary
    with the writer), everything else by its string."""
    import pyarrow as pa

    if pa.types.is_timestamp(data_type):
        return "timestamp"
    if pa.types.is_large_string(data_type):
        return "string"
    if pa.types.is_large_binary(data_type):
        return "binary"
    return str(data_type)


def file_schema_problem(relative: str, file_schema: Any, recorded_arrow: Any) -> str | None:
    """``verify``: how a typed file's Arrow schema differs from the recorded schema (None: it
    does not). A file written before ``mergeSchema`` added nullable columns is accepted."""
    recorded = {f.name: f for f in recorded_arrow}
    found = {f.name: f for f in file_schema}
    problems = [f"column '{f.name}' is {_arrow_kind(f.type)}, recorded {_arrow_kind(recorded[f.name].type)}"
                for f in file_schema if f.name in recorded and _arrow_kind(f.type) != _arrow_kind(recorded[f.name].type)]
    problems += [f"column '{name}' is not in the recorded schema" for name in found if name not in recorded]
    problems += [f"recorded column '{name}' is missing" for name, field in recorded.items()
                 if name not in found and not field.nullable]
    if not problems:
        return None
    return f"file {relative} has another schema than the output's recorded one: {'; '.join(problems)}"


def recorded_arrow_schema(storage: FileStorage) -> Any | None:
    """``verify``: the recorded schema of the output on ``storage`` as Arrow (None: not recorded)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    try:
        schema = recorded_schema(OutputLayout(storage).meta)
    except ConfigError:
        return None  # verify reports a damaged record through its metadata findings
    return None if schema is None else to_arrow_schema(schema, timezone="UTC")
