"""The README's format table (issue 35 item 10: it listed ``sparklink.kafka`` twice)."""

from __future__ import annotations

import re
from pathlib import Path

import sparklink


def test_the_readme_format_table_lists_each_registered_format_once():
    text = (Path(__file__).parents[1] / "README.md").read_text()
    table = text.split("| format | reads | writes | guide |", 1)[1].split("\n\n", 1)[0]
    listed = re.findall(r"^\| `([a-z.-]+)` \|", table, re.M)
    assert len(listed) == len(set(listed)), listed
    assert set(listed) <= {cls.name() for cls in sparklink.data_sources()}
