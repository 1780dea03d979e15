"""The target table as the sink sees it: its columns, CQL types and primary key (driver side,
read from ``system_schema`` when a write starts), checked against the DataFrame's schema.

Every check fails before any row is written, with one line naming the table and the column:
a missing table, a DataFrame column the table lacks, a primary-key column the DataFrame lacks,
a Spark type no CQL type of the column takes. A null primary-key value is refused by the
writers (:func:`null_key_error`), before the record batch holding it is sent.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from sparklink.errors import ConfigError, DataError

_INTEGERS = ("tinyint", "smallint", "int", "bigint", "varint")
# Spark type -> the CQL types (outer kind, frozen<> stripped) its values bind to
_ACCEPTS: tuple[tuple[type[DataType], tuple[str, ...]], ...] = (
    (ByteType, _INTEGERS), (ShortType, _INTEGERS[1:]), (IntegerType, _INTEGERS[2:]), (LongType, _INTEGERS[3:]),
    (FloatType, ("float", "double")), (DoubleType, ("double",)), (BooleanType, ("boolean",)),
    (DecimalType, ("decimal",)), (StringType, ("text", "varchar", "ascii", "inet", "uuid", "timeuuid")),
    (BinaryType, ("blob",)), (DateType, ("date",)), (TimestampType, ("timestamp",)),
    (TimestampNTZType, ("timestamp",)), (ArrayType, ("list", "set")), (MapType, ("map",)),
)
_FROZEN = re.compile(r"^frozen<(.*)>$")


def outer_kind(cql_type: str) -> str:
    """``frozen<list<int>>`` -> ``list``; ``text`` -> ``text``."""
    text = cql_type.strip()
    match = _FROZEN.match(text)
    if match:
        text = match.group(1)
    return text.split("<", 1)[0].strip().lower()


def quote(name: str) -> str:
    """``name`` as a quoted CQL identifier."""
    return '"' + name.replace('"', '""') + '"'


@dataclass(frozen=True, kw_only=True)
class TargetTable:
    """A table's columns (name -> CQL type) and primary key (partition key, then clustering)."""

    keyspace: str
    name: str
    columns: dict[str, str]
    partition_key: tuple[str, ...]
    clustering: tuple[str, ...]

    @property
    def qualified(self) -> str:
        return f"{quote(self.keyspace)}.{quote(self.name)}"

    @property
    def primary_key(self) -> tuple[str, ...]:
        return self.partition_key + self.clustering

    def __str__(self) -> str:
        return f"{self.keyspace}.{self.name}"

    def column_for(self, field_name: str) -> str | None:
        """The table column a DataFrame field writes: the same name, else the one name equal
        to it ignoring case (CQL folds unquoted names to lower case)."""
        if field_name in self.columns:
            return field_name
        close = [c for c in self.columns if c.lower() == field_name.lower()]
        return close[0] if len(close) == 1 else None

    def bind(self, schema: StructType) -> list[str]:
        """The table column of each DataFrame field, in order; ConfigError on the first
        mismatch (driver side, before any write)."""
        targets = []
        for struct_field in schema.fields:
            column = self.column_for(struct_field.name)
            if column is None:
                raise ConfigError("table", f"{self} has no column '{struct_field.name}' (DataFrame column); its columns "
                                  f"are {', '.join(self.columns)}")
            kind = outer_kind(self.columns[column])
            accepted = next((kinds for spark_type, kinds in _ACCEPTS if isinstance(struct_field.dataType, spark_type)),
                            ())
            if kind not in accepted:
                raise ConfigError("table", f"column '{column}' of {self} is {self.columns[column]}; the DataFrame's "
                                  f"'{struct_field.name}' is {struct_field.dataType.simpleString()}, which it does not "
                                  "take", ", ".join(accepted) or "no CQL type")
            targets.append(column)
        missing = [k for k in self.primary_key if k not in targets]
        if missing:
            raise ConfigError("table", f"the DataFrame lacks primary-key column(s) {missing} of {self} (primary key "
                              f"{list(self.primary_key)})")
        return targets


def load_target_table(session, keyspace: str, name: str) -> TargetTable | None:
    """The table from ``system_schema`` (None if it does not exist)."""
    rows = list(session.execute("SELECT column_name, kind, position, type FROM system_schema.columns "
                                "WHERE keyspace_name = %s AND table_name = %s", (keyspace, name)))
    if not rows:
        return None
    columns = {row.column_name: row.type for row in sorted(rows, key=lambda r: (r.kind, r.position))}
    partition = tuple(r.column_name for r in sorted((r for r in rows if r.kind == "partition_key"),
                                                    key=lambda r: r.position))
    clustering = tuple(r.column_name for r in sorted((r for r in rows if r.kind == "clustering"),
                                                     key=lambda r: r.position))
    return TargetTable(keyspace=keyspace, name=name, columns=columns, partition_key=partition, clustering=clustering)


def keyspace_exists(session, keyspace: str) -> bool:
    return bool(list(session.execute("SELECT keyspace_name FROM system_schema.keyspaces WHERE keyspace_name = %s",
                                     (keyspace,))))


def null_key_error(batch: pa.RecordBatch, key_fields: list[str], table: str) -> DataError | None:
    """A DataError naming the first primary-key field with a null in ``batch`` (None if none)."""
    for name in key_fields:
        column = batch.column(name)
        if column.null_count:
            row = pc.index(pc.is_null(column), True).as_py()
            return DataError(f"primary-key column '{name}' of {table} is null in row {row} of a record batch; "
                             "Cassandra cannot store a row without its key (nothing of this batch was written)")
    return None
