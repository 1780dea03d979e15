"""The ``sparklink.postgres`` table source: bounded range-partitioned reads and a stream by
a monotonically increasing column.

*Bounded* (``spark.read``): the table or query is split, as Spark's JDBC source does, into
``numPartitions`` ranges of ``partitionColumn`` between ``lowerBound`` and ``upperBound``
(the first range also takes values below the lower bound and NULLs, the last those above the
upper bound); each range is one split, read by one task with ``COPY (SELECT ...) TO STDOUT``
straight into Arrow record batches.

*Streaming* (``spark.readStream``): the offset is the last value of ``offsetColumn`` read,
``{"v": 1, "last": "<text form>"}``; each micro-batch reads ``offsetColumn > last AND <= new
last``. The column must grow monotonically in commit order (a sequence written by a single
writer, an ingestion timestamp set at commit): a row committed later with a smaller value is
never read.
"""

from __future__ import annotations

import datetime as dt
import decimal
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import psycopg
import pyarrow as pa
from psycopg import pq, sql
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    ByteType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    ShortType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from sparklink.errors import ConfigError
from sparklink.options import Options, parse_int
from sparklink.postgres.connection import OPTION_DSN, ConnectionSettings
from sparklink.postgres.copy_transport import copy_out
from sparklink.postgres.identifiers import TableName, parse_table_name
from sparklink.postgres.type_mapping import select_expression, spark_field_for
from sparklink.source import READ_ALL, Boundedness, Offset, ReadLimit, Source, SourceReader, Split, SplitEnumerator

OPTION_TABLE = "table"
OPTION_QUERY = "query"
OPTION_PARTITION_COLUMN = "partitionColumn"
OPTION_LOWER_BOUND = "lowerBound"
OPTION_UPPER_BOUND = "upperBound"
OPTION_NUM_PARTITIONS = "numPartitions"
OPTION_OFFSET_COLUMN = "offsetColumn"
OPTION_MAX_ROWS_PER_TRIGGER = "maxRowsPerTrigger"
KNOWN_OPTIONS = (OPTION_DSN, OPTION_TABLE, OPTION_QUERY, OPTION_PARTITION_COLUMN, OPTION_LOWER_BOUND,
                 OPTION_UPPER_BOUND, OPTION_NUM_PARTITIONS, OPTION_OFFSET_COLUMN, OPTION_MAX_ROWS_PER_TRIGGER)
OFFSET_VERSION = 1
_NUMERIC_TYPES = (ByteType, ShortType, IntegerType, LongType, FloatType, DoubleType, DecimalType)
_TIME_TYPES = (DateType, TimestampType, TimestampNTZType)


@dataclass(frozen=True, kw_only=True)
class RangePartitioning:
    """``partitionColumn`` split into ``num_partitions`` strides between the bounds."""

    column: str
    lower: str
    upper: str
    num_partitions: int

    def __post_init__(self) -> None:
        if self.num_partitions < 1:
            raise ConfigError(OPTION_NUM_PARTITIONS, f"must be at least 1, got {self.num_partitions}")

    def boundaries(self, field: StructField) -> list[str]:
        """The ``num_partitions - 1`` inner boundaries, as text PostgreSQL casts to the column type."""
        kind = field.dataType
        # Decimals for a numeric column, datetimes for a date or timestamp one: never mixed, which
        # mypy cannot follow through the branches below
        low: Any
        high: Any
        if isinstance(kind, _NUMERIC_TYPES):
            try:
                low, high = decimal.Decimal(self.lower), decimal.Decimal(self.upper)
            except decimal.InvalidOperation:
                raise ConfigError(OPTION_LOWER_BOUND, f"bounds '{self.lower}'..'{self.upper}' are not numbers "
                                                      f"(column '{self.column}' is {kind.simpleString()})") from None
            integral = isinstance(kind, (ByteType, ShortType, IntegerType, LongType))
        elif isinstance(kind, _TIME_TYPES):
            low, high = _parse_time(self.lower, OPTION_LOWER_BOUND), _parse_time(self.upper, OPTION_UPPER_BOUND)
            integral = False
        else:
            raise ConfigError(OPTION_PARTITION_COLUMN, f"column '{self.column}' is {kind.simpleString()}",
                              "a numeric, date or timestamp column")
        if low > high:
            raise ConfigError(OPTION_LOWER_BOUND, f"'{self.lower}' is above upperBound '{self.upper}'")
        parts = self.num_partitions
        if isinstance(low, decimal.Decimal):
            stride = (high - low) / parts
            values = [low + stride * i for i in range(1, parts)]
            if integral:
                values = [v.to_integral_value(rounding=decimal.ROUND_FLOOR) for v in values]
            texts = [str(v) for v in values]
        else:
            stride = (high - low) / parts
            texts = [(low + stride * i).isoformat(sep=" ") for i in range(1, parts)]
        unique: list[str] = []
        for text in texts:
            if not unique or unique[-1] != text:
                unique.append(text)
        return unique


def _parse_time(text: str, option: str) -> dt.datetime:
    try:
        return dt.datetime.fromisoformat(text.strip())
    except ValueError:
        raise ConfigError(option, f"'{text}' is not a date or timestamp", "ISO form, e.g. 2024-01-31 12:00:00") from None


def _prepare(conn: psycopg.Connection, statement: bytes) -> pq.abc.PGresult | str:
    """Parse and analyse ``statement`` as the unnamed prepared statement, without running it
    (the extended protocol: the server refuses more than one statement). The error text on failure."""
    result = conn.pgconn.prepare(b"", statement)
    if result.status != pq.ExecStatus.COMMAND_OK:
        return (result.error_message or b"").decode("utf-8", "replace").strip()
    return conn.pgconn.describe_prepared(b"")


def check_single_statement(conn: psycopg.Connection, query: str) -> None:
    """Refuse a ``query`` option that is not exactly one statement (driver side, once per read).

    The query is parsed by the server without running it, so ``SELECT 1; DELETE FROM t`` or a
    text that closes the sub-query it is wrapped in (``SELECT 1) s; DELETE ...``) runs nothing."""
    outcome = _prepare(conn, query.encode("utf-8"))
    if isinstance(outcome, str):
        if "multiple commands" in outcome:
            raise ConfigError(OPTION_QUERY, "must be exactly one statement (a SELECT); it holds several")
        raise ConfigError(OPTION_QUERY, f"is not one valid statement: {outcome}")


def describe_relation(conn: psycopg.Connection, relation: sql.Composable) -> StructType:
    """The Spark schema of a table or query, from PostgreSQL's own type names (driver side).

    The ``SELECT * FROM <relation>`` is described, never run; the type names are looked up
    on a read-only session (see :meth:`ConnectionSettings.connect`)."""
    outcome = _prepare(conn, sql.SQL("SELECT * FROM {} s").format(relation).as_bytes(conn))
    if isinstance(outcome, str):
        raise psycopg.ProgrammingError(outcome)
    # fname is None only for a column number out of range
    columns = [((outcome.fname(i) or b"").decode("utf-8"), outcome.ftype(i), outcome.fmod(i))
               for i in range(outcome.nfields)]
    try:
        names = conn.execute("SELECT format_type(t, m) FROM unnest(%s::oid[], %s::int4[]) WITH ORDINALITY "
                             "AS u(t, m, n) ORDER BY n",
                             [[c[1] for c in columns], [c[2] for c in columns]]).fetchall()
    finally:
        conn.rollback()
    return StructType([spark_field_for(name, type_name) for (name, _, _), (type_name,) in zip(columns, names, strict=False)])


class PostgresEnumerator(SplitEnumerator):
    """Driver side. Bounded: one split per range. Streaming: offsets are offsetColumn values."""

    def __init__(self, source: "PostgresTableSource", *, streaming: bool):
        self.source = source
        self.streaming = streaming
        self._conn: psycopg.Connection | None = None

    @property
    def conn(self) -> psycopg.Connection:
        if self._conn is None:
            self._conn = self.source.connection.connect(autocommit=True, read_only=True)
        return self._conn

    def initial_offset(self) -> Offset:
        return {"v": OFFSET_VERSION, "last": None}

    def latest_offset(self, start: Offset, limit: ReadLimit) -> Offset:
        if not self.streaming:
            return {"v": OFFSET_VERSION, "last": None}
        assert self.source.offset_column is not None  # create_enumerator refuses a stream without offsetColumn
        column = sql.Identifier(self.source.offset_column)
        conditions, params = [sql.SQL("{} IS NOT NULL").format(column)], []
        if start.get("last") is not None:
            conditions.append(sql.SQL("{} > %s").format(column))
            params.append(start["last"])
        if limit.until is not None and limit.until.get("last") is not None:
            conditions.append(sql.SQL("{} <= %s").format(column))
            params.append(limit.until["last"])
        elif limit.until is not None:
            return dict(start)
        inner = sql.SQL("SELECT {c} FROM {rel} s WHERE {cond} ORDER BY {c}").format(
            c=column, rel=self.source.relation, cond=sql.SQL(" AND ").join(conditions))
        if limit.max_rows is not None:
            inner = sql.SQL("{} LIMIT {}").format(inner, sql.Literal(limit.max_rows))
        try:
            row = self.conn.execute(sql.SQL("SELECT max({c})::text FROM ({inner}) m").format(c=column, inner=inner),
                                    params).fetchone()
        except psycopg.Error as exc:
            raise self.source.connection.error(f"finding new rows by {OPTION_OFFSET_COLUMN}", exc) from None
        if row is None or row[0] is None:
            return dict(start)
        return {"v": OFFSET_VERSION, "last": row[0]}

    def available_now_offset(self, start: Offset | None) -> Offset:
        return self.latest_offset(start or self.initial_offset(), READ_ALL)

    def plan_splits(self, start: Offset, end: Offset) -> list[Split]:
        if self.streaming:
            if end.get("last") is None or end.get("last") == start.get("last"):
                return []
            return [Split(split_id=f"offset-{end['last']}", state={"after": start.get("last"), "upTo": end["last"]})]
        partitioning = self.source.partitioning
        if partitioning is None:
            return [Split(split_id="all", state={})]
        field = self.source.field(partitioning.column)
        bounds = partitioning.boundaries(field)
        edges: list[str | None] = [None, *bounds, None]
        return [Split(split_id=f"range-{i}", state={"from": edges[i], "to": edges[i + 1], "first": i == 0})
                for i in range(len(edges) - 1)]

    def supported_limits(self) -> frozenset[str]:
        return frozenset({"max_rows"})

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


class PostgresReader(SourceReader):
    """Executor side: one COPY per split, parsed into Arrow record batches of the schema."""

    def __init__(self, source: "PostgresTableSource", schema: StructType):
        self.source = source
        self.schema = StructType([StructField(f.name, f.dataType, True) for f in schema.fields])
        self.arrow_schema = to_arrow_schema(self.schema, timezone="UTC")
        self._conn: psycopg.Connection | None = None

    def _where(self, split: Split) -> tuple[sql.Composable, list[str]]:
        state = split.state
        conditions: list[sql.Composable] = []
        params: list[str] = []
        if "upTo" in state:  # a stream's split: the source has an offsetColumn
            assert self.source.offset_column is not None
            column = sql.Identifier(self.source.offset_column)
            if state["after"] is not None:
                conditions.append(sql.SQL("{} > %s").format(column))
                params.append(state["after"])
            conditions.append(sql.SQL("{} <= %s").format(column))
            params.append(state["upTo"])
        elif "first" in state:  # one range of a partitioned read
            assert self.source.partitioning is not None
            column = sql.Identifier(self.source.partitioning.column)
            bounded: list[sql.Composable] = []
            if state["from"] is not None:
                bounded.append(sql.SQL("{} >= %s").format(column))
                params.append(state["from"])
            if state["to"] is not None:
                bounded.append(sql.SQL("{} < %s").format(column))
                params.append(state["to"])
            condition = sql.SQL(" AND ").join(bounded) if bounded else sql.SQL("TRUE")
            if state["first"]:
                condition = sql.SQL("({} OR {} IS NULL)").format(condition, column)
            conditions.append(condition)
        if not conditions:
            return sql.SQL("TRUE"), params
        return sql.SQL(" AND ").join(conditions), params

    def read(self, split: Split) -> Iterator[pa.RecordBatch]:
        if self._conn is None:
            self._conn = self.source.connection.connect(read_only=True)
        where, params = self._where(split)
        columns = sql.SQL(", ").join(select_expression(f) for f in self.schema.fields)
        query = sql.SQL("SELECT {} FROM {} s WHERE {}").format(columns, self.source.relation, where)
        try:
            self._conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            yield from copy_out(self._conn.cursor(), query, self.arrow_schema, params)
            self._conn.commit()
        except psycopg.Error as exc:
            raise self.source.connection.error(f"reading split {split.split_id}", exc) from None

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


class PostgresTableSource(Source):
    """The source: options are validated and the schema looked up on the driver."""

    def __init__(self, options: Mapping[str, str] | None = None):
        super().__init__(options)
        opts = Options(options)
        opts.reject_unknown(KNOWN_OPTIONS)
        self.connection = ConnectionSettings(dsn=opts.require(OPTION_DSN))
        table, query = opts.get(OPTION_TABLE), opts.get(OPTION_QUERY)
        if (table is None) == (query is None):
            raise ConfigError(OPTION_TABLE, "give exactly one of 'table' and 'query'")
        self.table: TableName | None = parse_table_name(table) if table is not None else None
        self.query = query
        partition_options = [opts.get(k) for k in (OPTION_PARTITION_COLUMN, OPTION_LOWER_BOUND, OPTION_UPPER_BOUND,
                                                   OPTION_NUM_PARTITIONS)]
        if any(v is not None for v in partition_options) and not all(v is not None for v in partition_options):
            raise ConfigError(OPTION_PARTITION_COLUMN, "partitionColumn, lowerBound, upperBound and numPartitions "
                                                       "go together: give all four or none")
        self.partitioning: RangePartitioning | None = None
        column, lower, upper, count = partition_options
        if column is not None:
            assert lower is not None and upper is not None and count is not None  # all four or none (above)
            self.partitioning = RangePartitioning(
                column=column, lower=lower, upper=upper,
                num_partitions=parse_int(OPTION_NUM_PARTITIONS, count, minimum=1))
        self.offset_column = opts.get(OPTION_OFFSET_COLUMN)
        max_rows = opts.get(OPTION_MAX_ROWS_PER_TRIGGER)
        self.max_rows_per_trigger = parse_int(OPTION_MAX_ROWS_PER_TRIGGER, max_rows, minimum=1) if max_rows else None
        self._schema: StructType | None = None

    @property
    def relation(self) -> sql.Composable:
        if self.table is not None:
            return self.table.identifier
        assert self.query is not None  # exactly one of table and query (__init__)
        return sql.SQL("({})").format(sql.SQL(self.query))

    @property
    def boundedness(self) -> Boundedness:
        return Boundedness.CONTINUOUS_UNBOUNDED if self.offset_column else Boundedness.BOUNDED

    def schema(self) -> StructType:
        if self._schema is None:
            with self.connection.connect(read_only=True) as conn:
                if self.query is not None:
                    check_single_statement(conn, self.query)
                try:
                    self._schema = describe_relation(conn, self.relation)
                except psycopg.Error as exc:
                    what = f"table {self.table}" if self.table is not None else "the query"
                    raise self.connection.error(f"describing {what}", exc) from None
            for option, column in ((OPTION_PARTITION_COLUMN, self.partitioning and self.partitioning.column),
                                   (OPTION_OFFSET_COLUMN, self.offset_column)):
                if column and column not in self._schema.names:
                    raise ConfigError(option, f"column '{column}' is not in the source", ", ".join(self._schema.names))
        return self._schema

    def field(self, name: str) -> StructField:
        return self.schema()[name]

    def create_enumerator(self, *, streaming: bool) -> PostgresEnumerator:
        if streaming and not self.offset_column:
            raise ConfigError(OPTION_OFFSET_COLUMN, "is required for spark.readStream (a monotonically increasing "
                                                    "column whose last value is the offset)")
        self.schema()
        return PostgresEnumerator(self, streaming=streaming)

    def create_reader(self, schema: StructType) -> PostgresReader:
        return PostgresReader(self, schema)

    def default_read_limit(self) -> ReadLimit:
        return ReadLimit(max_rows=self.max_rows_per_trigger) if self.max_rows_per_trigger else READ_ALL
