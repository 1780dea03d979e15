"""The option tables in docs/ are generated from the connectors' option specs; this fails when
one differs (no Spark: the specs are plain Python)."""

from pathlib import Path

from sparklink.options_doc import COMMAND, differences, load_table, tables

ROOT = Path(__file__).resolve().parents[1]


def test_docs_option_tables_match_the_specs():
    diff = differences(ROOT)
    assert not diff, f"the option tables in docs/ differ from the specs:\n{diff}\nregenerate them: {COMMAND}"


def test_every_connector_table_is_documented():
    names = {name for _, name, _ in tables()}
    assert len(names) == len(tables())
    for _, _, ref in tables():
        assert load_table(ref).specs(), ref
