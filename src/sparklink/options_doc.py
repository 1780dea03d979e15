"""The option tables in ``docs/``, generated from the connectors' option specs (a dev tool; no Spark).

Each table sits between two marker comments in its Markdown file::

    <!-- options:kafka-source (generated: python -m sparklink.options_doc) -->
    | option | values | default | meaning |
    ...
    <!-- /options:kafka-source -->

``python -m sparklink.options_doc`` rewrites every table from the specs (:func:`tables` says which
table goes where); ``--check`` only reports the tables that differ (the test suite runs the same
comparison, :func:`differences`). Edit the specs (:mod:`sparklink.options`), never the tables.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import re
import sys
from pathlib import Path

from sparklink.options import Option, OptionTable

#: Option tables that belong to no one connector (shared settings, documented once).
SHARED_TABLES: tuple[tuple[str, str, str], ...] = (
    ("docs/object-stores.md", "s3", "sparklink.storage.output:S3OutputOptions"),
)


def tables() -> tuple[tuple[str, str, str], ...]:
    """(docs file, marker name, "module:TableClass") of every generated table: each connector's
    source and sink tables as its contract declares them (:mod:`sparklink.connectors`), then the
    shared ones; shared options (S3, txn) are one row in a connector's table."""
    from sparklink.connectors import formats

    declared = [side for spec in formats() for side in (spec.source_options, spec.sink_options)]
    return tuple((d.doc, d.marker, d.table) for d in declared if d is not None and d.doc is not None
                 and d.marker is not None) + SHARED_TABLES


COMMAND = "python -m sparklink.options_doc"


def _begin(name: str) -> str:
    return f"<!-- options:{name} (generated: {COMMAND}) -->"


def _end(name: str) -> str:
    return f"<!-- /options:{name} -->"


def load_table(ref: str) -> type[OptionTable]:
    module, _, name = ref.partition(":")
    table = getattr(importlib.import_module(module), name)
    if not (isinstance(table, type) and issubclass(table, OptionTable)):
        raise TypeError(f"{ref} is not an OptionTable")
    return table


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _name(spec: Option) -> str:
    text = f"`{spec.key}`"
    if spec.aliases:
        text += " (alias " + ", ".join(f"`{a}`" for a in spec.aliases) + ")"
    return text


def render(table: type[OptionTable], *, collapse: bool = True) -> str:
    """The Markdown table of ``table``'s options, in declaration order; with ``collapse``, the
    options of each shared group (:attr:`OptionTable.group`) are one row."""
    grouped = {spec.key for _, specs in table.groups().values() for spec in specs} if collapse else set()
    specs = [spec for spec in table.specs() if spec.key not in grouped]
    with_applies = any(spec.applies is not None for spec in specs)
    with_builder = any(spec.builder for spec in specs)
    with_example = any(spec.example for spec in specs)
    header = ["option", "values", "default"] + (["applies to"] if with_applies else []) + ["meaning"]
    header += (["builder"] if with_builder else []) + (["example"] if with_example else [])
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for spec in specs:
        row = [_name(spec), spec.parser.doc, spec.default_text()]
        if with_applies:
            row.append(spec.applies.doc if spec.applies is not None else "")
        row.append(spec.doc)
        if with_builder:
            row.append(f"`{spec.builder}`" if spec.builder else "")
        if with_example:
            example = spec.example or ""
            quoted = f"'{example}'" if '"' in example else f'"{example}"'
            row.append(f'`.option("{spec.key}", {quoted})`' if example else "")
        lines.append("| " + " | ".join(_cell(c) for c in row) + " |")
    rows = [(", ".join(f"`{spec.key}`" for spec in members), default, text)
            for text, (default, members) in table.groups().items() if collapse]
    rows += [(f"`{pattern}`", "none", doc) for pattern, doc in table.passthrough_doc]
    for name, default, doc in rows:
        row = [name, "text", default] + ([""] if with_applies else []) + [doc]
        row += ([""] if with_builder else []) + ([""] if with_example else [])
        lines.append("| " + " | ".join(_cell(c) for c in row) + " |")
    return "\n".join(lines) + "\n"


def regenerate(text: str, name: str, table: type[OptionTable], *, path: str = "") -> str:
    """``text`` with the table between ``name``'s markers generated anew."""
    pattern = re.compile(re.escape(_begin(name)) + r"\n.*?" + re.escape(_end(name)), re.DOTALL)
    if len(pattern.findall(text)) != 1:
        raise ValueError(f"{path}: expected one pair of markers {_begin(name)} ... {_end(name)}")
    rendered = render(table, collapse="group" not in vars(table))  # a table of shared options shows each of them
    return pattern.sub(lambda _: f"{_begin(name)}\n{rendered}{_end(name)}", text)


def _generated(root: Path) -> dict[Path, tuple[str, str]]:
    """Per docs file: (its text now, its text with every table generated)."""
    result: dict[Path, tuple[str, str]] = {}
    for doc, name, ref in tables():
        path = root / doc
        before, current = result.get(path, (path.read_text(), path.read_text()))
        result[path] = (before, regenerate(current, name, load_table(ref), path=doc))
    return result


def differences(root: Path) -> str:
    """A unified diff of every docs table that differs from its specs ("" when none does)."""
    out: list[str] = []
    for path, (before, after) in _generated(root).items():
        if before != after:
            out.extend(difflib.unified_diff(before.splitlines(keepends=True), after.splitlines(keepends=True),
                                            f"{path} (now)", f"{path} (from the specs)"))
    return "".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=COMMAND, description="Write the option tables in docs/ from the specs.")
    parser.add_argument("--root", type=Path, default=Path.cwd(), help="the repository (default: the current directory)")
    parser.add_argument("--check", action="store_true", help="only report tables that differ (exit status 1)")
    args = parser.parse_args(argv)
    if args.check:
        diff = differences(args.root)
        if diff:
            print(diff + f"\nThe option tables differ from the specs: run {COMMAND}")
            return 1
        return 0
    for path, (before, after) in _generated(args.root).items():
        if before != after:
            path.write_text(after)
            print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
