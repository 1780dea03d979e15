"""Table names from options follow PostgreSQL's quoting rules."""

from __future__ import annotations

import pytest

from sparklink.errors import ConfigError
from sparklink.postgres.identifiers import TableName, parse_table_name


@pytest.mark.parametrize(("text", "schema", "name"), [
    ("events", None, "events"),
    ("Public.Events", "public", "events"),
    ('"My Schema"."My ""Table"""', "My Schema", 'My "Table"'),
    ('"we;ird"."ta.ble; DROP TABLE x; --"', "we;ird", "ta.ble; DROP TABLE x; --"),
    (' s . "T" ', "s", "T"),
], ids=["bare", "folded", "quoted", "hostile", "spaces"])
def test_parse_table_name(text, schema, name):
    assert parse_table_name(text) == TableName(schema=schema, name=name)


@pytest.mark.parametrize(("text", "problem"), [
    ("a.b.c", "3 parts"), ('"open', "unterminated"), ("a b", "unexpected"), ("a.", "empty identifier"),
], ids=["three-parts", "unterminated", "space", "trailing-dot"])
def test_bad_table_names(text, problem):
    with pytest.raises(ConfigError, match=problem):
        parse_table_name(text)


def test_str_round_trips():
    table = TableName(schema='s"x', name="t.y")
    assert parse_table_name(str(table)) == table
