"""A decoder of PostgreSQL's ``pgoutput`` logical replication protocol, version 1 (executor side).

``pg_logical_slot_peek_binary_changes(slot, ..., 'proto_version', '1', 'publication_names', pub)``
returns one row ``(lsn, xid, data)`` per protocol message; :func:`decode` turns ``data`` into one of
the message classes below. Only the messages protocol 1 defines are understood (Begin, Commit,
Origin, Relation, Type, Insert, Update, Delete, Truncate, logical Message); anything else is refused
with the message's first byte, never skipped. Column values stay in PostgreSQL's text form here;
:mod:`sparklink.postgres.cdc_reader` converts them to the table's column types.
"""

from __future__ import annotations

import datetime as dt
import struct
from dataclasses import dataclass

from sparklink.errors import DataError

POSTGRES_EPOCH = dt.datetime(2000, 1, 1, tzinfo=dt.timezone.utc)

# A column value of a tuple: text (bytes of its text form), None (SQL NULL) or UNCHANGED (a TOASTed
# value the update did not touch, which the WAL does not carry)
UNCHANGED = object()


@dataclass(frozen=True)
class Begin:
    final_lsn: int
    commit_ts: dt.datetime
    xid: int


@dataclass(frozen=True)
class Commit:
    commit_lsn: int
    end_lsn: int  # the position after the commit record: a batch boundary
    commit_ts: dt.datetime


@dataclass(frozen=True)
class Origin:
    lsn: int
    name: str


@dataclass(frozen=True)
class Column:
    name: str
    type_oid: int
    type_modifier: int
    is_key: bool


@dataclass(frozen=True)
class Relation:
    relation_id: int
    namespace: str
    name: str
    replica_identity: str  # d default (primary key), n nothing, f full, i index
    columns: tuple[Column, ...]


@dataclass(frozen=True)
class TypeMessage:
    type_oid: int
    namespace: str
    name: str


@dataclass(frozen=True)
class Insert:
    relation_id: int
    new: tuple[object, ...]


@dataclass(frozen=True)
class Update:
    relation_id: int
    old: tuple[object, ...] | None  # with replica identity full ('O') or a changed key ('K')
    old_is_key: bool
    new: tuple[object, ...]


@dataclass(frozen=True)
class Delete:
    relation_id: int
    old: tuple[object, ...]
    old_is_key: bool  # only the key columns are set (replica identity default / index)


@dataclass(frozen=True)
class Truncate:
    relation_ids: tuple[int, ...]
    options: int


@dataclass(frozen=True)
class LogicalMessage:
    transactional: bool
    lsn: int
    prefix: str
    content: bytes


Message = Begin | Commit | Origin | Relation | TypeMessage | Insert | Update | Delete | Truncate | LogicalMessage

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")


def timestamp(micros: int) -> dt.datetime:
    """A pgoutput timestamp (microseconds since 2000-01-01 UTC) as an aware datetime."""
    return POSTGRES_EPOCH + dt.timedelta(microseconds=micros)


def format_lsn(lsn: int) -> str:
    """``16/B374D848``: an LSN as PostgreSQL writes it."""
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


def parse_lsn(text: str) -> int:
    high, _, low = text.partition("/")
    return (int(high, 16) << 32) | int(low, 16)


class _Cursor:
    __slots__ = ("data", "pos")

    def __init__(self, data: bytes):
        self.data = data
        self.pos = 0

    def take(self, fmt: struct.Struct) -> int:
        value = fmt.unpack_from(self.data, self.pos)[0]
        self.pos += fmt.size
        return int(value)

    def byte(self) -> str:
        value = chr(self.data[self.pos])  # IndexError at the end: reported as a malformed message
        self.pos += 1
        return value

    def string(self) -> str:
        end = self.data.index(b"\0", self.pos)
        value = self.data[self.pos:end].decode("utf-8")
        self.pos = end + 1
        return value

    def raw(self, length: int) -> bytes:
        value = self.data[self.pos:self.pos + length]
        if len(value) != length:
            raise DataError(f"pgoutput message truncated: wanted {length} bytes at offset {self.pos}")
        self.pos += length
        return bytes(value)

    def tuple_data(self) -> tuple[object, ...]:
        # the hot path of a change message: locals and unpack_from only
        data, pos = self.data, self.pos
        count = _I16.unpack_from(data, pos)[0]
        pos += 2
        values: list[object] = []
        append = values.append
        for _ in range(count):
            kind = data[pos]
            pos += 1
            if kind == 116:  # 't': text
                length = _I32.unpack_from(data, pos)[0]
                value = bytes(data[pos + 4:pos + 4 + length])
                if len(value) != length:
                    raise DataError(f"pgoutput message truncated: wanted {length} bytes at offset {pos + 4}")
                append(value)
                pos += 4 + length
            elif kind == 110:  # 'n': SQL NULL
                append(None)
            elif kind == 117:  # 'u': an unchanged TOASTed value
                append(UNCHANGED)
            else:  # 'b' (binary) exists only from protocol 2 with the binary option, which is never asked for
                raise DataError(f"pgoutput tuple column of kind {chr(kind)!r} is not supported (protocol 1, text "
                                f"values)")
        self.pos = pos
        return tuple(values)


def decode(data: bytes) -> Message:
    """One pgoutput protocol 1 message. Raises DataError for an unknown or malformed message."""
    cursor = _Cursor(data)
    try:
        kind = cursor.byte()
        if kind == "B":
            final_lsn = cursor.take(_I64)
            return Begin(final_lsn, timestamp(cursor.take(_I64)), cursor.take(_U32))
        if kind == "C":
            cursor.take(_I8)
            commit_lsn, end_lsn = cursor.take(_I64), cursor.take(_I64)
            return Commit(commit_lsn, end_lsn, timestamp(cursor.take(_I64)))
        if kind == "I":
            relation_id = cursor.take(_U32)
            if cursor.byte() != "N":
                raise DataError("pgoutput Insert without a new tuple")
            return Insert(relation_id, cursor.tuple_data())
        if kind == "U":
            relation_id = cursor.take(_U32)
            marker = cursor.byte()
            old, old_is_key = None, False
            if marker in ("K", "O"):
                old, old_is_key = cursor.tuple_data(), marker == "K"
                marker = cursor.byte()
            if marker != "N":
                raise DataError(f"pgoutput Update: expected a new tuple, got {marker!r}")
            return Update(relation_id, old, old_is_key, cursor.tuple_data())
        if kind == "D":
            relation_id = cursor.take(_U32)
            marker = cursor.byte()
            if marker not in ("K", "O"):
                raise DataError(f"pgoutput Delete: expected a key or old tuple, got {marker!r}")
            return Delete(relation_id, cursor.tuple_data(), marker == "K")
        if kind == "R":
            relation_id = cursor.take(_U32)
            namespace, name = cursor.string(), cursor.string()
            identity = chr(cursor.take(_I8))
            columns = []
            for _ in range(cursor.take(_I16)):
                flags = cursor.take(_I8)
                column_name = cursor.string()
                columns.append(Column(column_name, cursor.take(_U32), cursor.take(_I32), bool(flags & 1)))
            return Relation(relation_id, namespace, name, identity, tuple(columns))
        if kind == "Y":
            return TypeMessage(cursor.take(_U32), cursor.string(), cursor.string())
        if kind == "O":
            return Origin(cursor.take(_I64), cursor.string())
        if kind == "T":
            count = cursor.take(_I32)
            options = cursor.take(_I8)
            return Truncate(tuple(cursor.take(_U32) for _ in range(count)), options)
        if kind == "M":
            transactional = bool(cursor.take(_I8))
            lsn = cursor.take(_I64)
            prefix = cursor.string()
            return LogicalMessage(transactional, lsn, prefix, cursor.raw(cursor.take(_I32)))
    except (struct.error, ValueError, UnicodeDecodeError, IndexError) as exc:
        raise DataError(f"malformed pgoutput message {bytes(data[:1])!r} ({len(data)} bytes): {exc}") from None
    raise DataError(f"pgoutput message type {kind!r} is not part of protocol version 1 (first byte {bytes(data[:1])!r})")
