"""Arrow record batches in and out of PostgreSQL through ``COPY``.

The hot path of every sink and of the table source. Sinks send binary COPY when the column
types allow it (:class:`CopyWriter`, :mod:`sparklink.postgres.binary_copy`), and CSV
otherwise, the form described here: record batches are encoded to CSV by
Arrow's C++ writer and streamed through psycopg's COPY, and ``COPY (SELECT ...) TO STDOUT``
is parsed back into record batches by Arrow's CSV reader, never row by row in Python.
In CSV mode PostgreSQL reads an unquoted empty field as NULL and ``""`` as the empty string;
Arrow writes strings quoted, so NULL and ``''`` stay distinct. Timestamps with a time zone are
sent as UTC wall-clock text on a session whose ``TimeZone`` is UTC (:func:`prepare_session`):
Arrow formats zone-aware timestamps about 25x slower than naive ones (per-value zone look-up),
which made them the largest cost of the whole write path. Runs on executors (writers,
readers) and on the driver (write-ahead commit).
"""

from __future__ import annotations

import io
import itertools
import json
from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager

import psycopg
import pyarrow as pa
import pyarrow.csv as pacsv
from psycopg import sql
from psycopg.copy import QueuedLibpqWriter

from sparklink.postgres import binary_copy
from sparklink.postgres.binary_copy import binary_encoder
from sparklink.postgres.identifiers import column_list

_WRITE_OPTIONS = pacsv.WriteOptions(include_header=False, batch_size=8192)
READ_BLOCK_SIZE = 4 << 20


def prepare_session(conn: psycopg.Connection) -> None:
    """Set the session time zone to UTC, which :func:`encode_csv` relies on (it sends
    zone-aware timestamps as UTC wall-clock text). Call on every connection that COPYs in."""
    conn.execute("SET TIME ZONE 'UTC'")


def _csv_ready_column(column: pa.Array) -> pa.Array:
    """Columns Arrow's CSV writer cannot encode the way PostgreSQL reads them (or encodes
    slowly), in a form it can: vectorised for timestamps, per value for binary and nested."""
    kind = column.type
    if pa.types.is_timestamp(kind) and kind.tz is not None:
        return column.cast(pa.timestamp(kind.unit))  # same instant, as UTC wall-clock time
    if pa.types.is_binary(kind) or pa.types.is_large_binary(kind) or pa.types.is_fixed_size_binary(kind):
        return pa.array([None if v is None else "\\x" + v.hex() for v in column.to_pylist()], pa.string())
    if pa.types.is_nested(kind) or pa.types.is_dictionary(kind) and pa.types.is_nested(kind.value_type):
        return pa.array([None if v is None else json.dumps(v, default=str) for v in column.to_pylist()], pa.string())
    return column


def encode_csv(batch: pa.RecordBatch) -> bytes:
    """One record batch as PostgreSQL-compatible CSV (no header)."""
    if any(not _plain(f.type) for f in batch.schema):
        batch = pa.RecordBatch.from_arrays([_csv_ready_column(c) for c in batch.columns], names=batch.schema.names)
    sink = io.BytesIO()
    pacsv.write_csv(batch, sink, _WRITE_OPTIONS)
    return sink.getvalue()


def _plain(kind: pa.DataType) -> bool:
    if pa.types.is_timestamp(kind) and kind.tz is not None:
        return False
    return not (pa.types.is_binary(kind) or pa.types.is_large_binary(kind) or pa.types.is_fixed_size_binary(kind)
                or pa.types.is_nested(kind))


def copy_in(cursor: psycopg.Cursor, table: sql.Composable, columns: list[str],
            batches: Iterable[pa.RecordBatch]) -> int:
    """COPY ``batches`` into ``table`` (``columns`` in batch order); returns the rows sent.
    Sets the session time zone to UTC (:func:`prepare_session`)."""
    prepare_session(cursor.connection)
    statement = sql.SQL("COPY {} ({}) FROM STDIN (FORMAT csv)").format(table, column_list(columns))
    rows = 0
    with cursor.copy(statement) as copy:
        for batch in batches:
            if batch.num_rows:
                copy.write(encode_csv(batch))
                rows += batch.num_rows
    return rows


class _CopyOutStream(io.RawIOBase):
    """A file-like view of a ``COPY ... TO STDOUT`` data stream (for Arrow's CSV reader)."""

    def __init__(self, chunks: Iterator[bytes | bytearray | memoryview]):
        self._chunks = chunks
        self._pending = b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        while not self._pending:
            try:
                self._pending = bytes(next(self._chunks))
            except StopIteration:
                return 0
        size = min(len(buffer), len(self._pending))
        buffer[:size] = self._pending[:size]
        self._pending = self._pending[size:]
        return size


def copy_out(cursor: psycopg.Cursor, query: sql.Composable, schema: pa.Schema,
             params: Sequence[object] | None = None) -> Iterator[pa.RecordBatch]:
    """Run ``COPY (query) TO STDOUT`` and yield record batches of ``schema``.

    ``query`` must select the columns of ``schema`` in order, rendering booleans as ``t``/``f``
    (PostgreSQL's text form) and binary columns as hex text (converted back here).
    """
    binary = [i for i, f in enumerate(schema) if pa.types.is_binary(f.type)]
    read_schema = pa.schema([pa.field(f.name, pa.string()) if i in binary else f for i, f in enumerate(schema)])
    statement = sql.SQL("COPY ({}) TO STDOUT (FORMAT csv)").format(query)
    with cursor.copy(statement, params) as copy:
        chunks = iter(copy)
        first = next(chunks, None)
        if first is None:
            return
        stream = io.BufferedReader(_CopyOutStream(itertools.chain([first], chunks)), buffer_size=1 << 20)
        reader = pacsv.open_csv(
            stream,
            read_options=pacsv.ReadOptions(column_names=schema.names, block_size=READ_BLOCK_SIZE, use_threads=False),
            parse_options=pacsv.ParseOptions(newlines_in_values=True),
            convert_options=pacsv.ConvertOptions(column_types=read_schema, strings_can_be_null=True,
                                                 quoted_strings_can_be_null=False, null_values=[""],
                                                 true_values=["t"], false_values=["f"]),
        )
        for batch in reader:
            if binary:
                arrays = list(batch.columns)
                for i in binary:
                    arrays[i] = pa.array([None if v is None else bytes.fromhex(v[2:]) for v in arrays[i].to_pylist()],
                                         pa.binary())
                batch = pa.RecordBatch.from_arrays(arrays, schema=schema)
            elif batch.schema != schema:
                batch = batch.cast(schema)
            yield batch


class CopyWriter:
    """One open ``COPY ... FROM STDIN`` that record batches are streamed into (executor side).

    Kept open across a task's record batches, so a task sends one COPY, not one per batch.
    Opened on the first batch: when every column of its Arrow schema matches its column type
    in ``column_types`` (``pg_type.typname`` of each target column, in ``columns`` order)
    exactly, the COPY is binary (:mod:`sparklink.postgres.binary_copy`), which PostgreSQL
    reads with about half the CPU; otherwise it is CSV. Sets the session time zone to UTC
    (see :func:`prepare_session`). Data is handed to a sender thread (psycopg's
    ``QueuedLibpqWriter``), so the network send overlaps with Spark delivering and encoding
    the next batch.
    """

    def __init__(self, cursor: psycopg.Cursor, table: sql.Composable, columns: list[str],
                 column_types: Sequence[str] | None = None):
        self._cursor = cursor
        self._table = table
        self._columns = columns
        self._column_types = column_types
        self._context: AbstractContextManager[psycopg.Copy] | None = None
        self._copy: psycopg.Copy | None = None  # entered by _start, on the first batch
        self._encode = encode_csv
        self.binary = False
        self.rows = 0
        self._open = True

    def _start(self, schema: pa.Schema) -> None:
        prepare_session(self._cursor.connection)
        encoder = binary_encoder(schema, self._column_types)
        self.binary = encoder is not None
        copy_format = sql.SQL("binary" if self.binary else "csv")
        statement = sql.SQL("COPY {} ({}) FROM STDIN (FORMAT {})").format(
            self._table, column_list(self._columns), copy_format)
        self._context = self._cursor.copy(statement, writer=QueuedLibpqWriter(self._cursor))
        self._copy = self._context.__enter__()
        if encoder is not None:
            self._encode = encoder.encode
            self._copy.write(binary_copy.HEADER)

    def write(self, batch: pa.RecordBatch) -> None:
        if self._context is None:
            self._start(batch.schema)
        if batch.num_rows:
            assert self._copy is not None  # _start entered the COPY
            self._copy.write(self._encode(batch))
        self.rows += batch.num_rows

    def finish(self) -> None:
        """End the COPY; the server reports any bad row here (raises)."""
        if self._open:
            self._open = False
            if self._context is not None:
                if self.binary:
                    assert self._copy is not None  # binary is set by _start, which entered the COPY
                    self._copy.write(binary_copy.TRAILER)
                self._context.__exit__(None, None, None)

    def cancel(self, reason: BaseException) -> None:
        """End the COPY with an error (the transaction is then rolled back by the caller)."""
        if self._open:
            self._open = False
            if self._context is None:
                return
            try:
                self._context.__exit__(type(reason), reason, reason.__traceback__)
            except psycopg.Error:
                pass  # the COPY was already broken; the caller rolls the transaction back
