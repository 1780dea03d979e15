"""Table and column names as SQL identifiers (driver and executor side).

Names from options follow PostgreSQL's rules: ``schema.table``, each part either bare (folded
to lower case, as the server does) or double-quoted (kept exactly, ``""`` for a quote), so a
hostile name such as ``"we;ird"."ta""ble"`` is one identifier, never SQL. Every statement is
built with :mod:`psycopg.sql`; values are always parameters.
"""

from __future__ import annotations

from dataclasses import dataclass

from psycopg import sql

from sparklink.errors import ConfigError


@dataclass(frozen=True, kw_only=True)
class TableName:
    """A possibly schema-qualified table name."""

    schema: str | None
    name: str

    def __post_init__(self) -> None:
        if not self.name:
            raise ConfigError("table", "the table name is empty")

    @property
    def identifier(self) -> sql.Identifier:
        return sql.Identifier(self.schema, self.name) if self.schema else sql.Identifier(self.name)

    def sibling(self, name: str) -> "TableName":
        """A table with another name in the same schema (marker tables live beside the target)."""
        return TableName(schema=self.schema, name=name)

    def __str__(self) -> str:
        def quote(part: str) -> str:
            return '"' + part.replace('"', '""') + '"'

        return f"{quote(self.schema)}.{quote(self.name)}" if self.schema else quote(self.name)


def parse_table_name(text: str, *, option: str = "table") -> TableName:
    """Parse ``public.events`` or ``"My Schema"."My Table"`` into a TableName."""
    parts: list[str] = []
    i, n = 0, len(text)
    while True:
        while i < n and text[i].isspace():
            i += 1
        if i < n and text[i] == '"':
            i += 1
            chars = []
            while True:
                if i >= n:
                    raise ConfigError(option, f"unterminated quoted identifier in {text!r}")
                if text[i] == '"':
                    if i + 1 < n and text[i + 1] == '"':
                        chars.append('"')
                        i += 2
                        continue
                    i += 1
                    break
                chars.append(text[i])
                i += 1
            part = "".join(chars)
        else:
            start = i
            while i < n and text[i] not in '."' and not text[i].isspace():
                i += 1
            part = text[start:i].lower()
        if not part:
            raise ConfigError(option, f"empty identifier in {text!r}", "name, schema.name, \"Quoted Name\"")
        parts.append(part)
        while i < n and text[i].isspace():
            i += 1
        if i >= n:
            break
        if text[i] != ".":
            raise ConfigError(option, f"unexpected {text[i]!r} in table name {text!r}; quote names with "
                                      f"special characters in double quotes")
        i += 1
    if len(parts) > 2:
        raise ConfigError(option, f"{text!r} has {len(parts)} parts", "table or schema.table")
    return TableName(schema=parts[0] if len(parts) == 2 else None, name=parts[-1])


def column_list(names: list[str]) -> sql.Composed:
    """``"a", "b"`` for a column list; DataFrame column names are used exactly as they are."""
    return sql.SQL(", ").join(sql.Identifier(name) for name in names)
