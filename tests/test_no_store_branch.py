"""No store question above ``storage/`` (ARCHITECTURE.md, "Layers"): a connector never asks
whether a path is local or on S3; it calls the storage seam, which answers per store. Spark-free,
a fraction of a second: every code line of the packages below (docstrings and comments left
out) is searched for the spellings such a question takes (``is_local``, ``s3 is None``,
``isinstance(..., S3Location)``, scheme tests); a failure names the file and line.

Checked: ``delta/``, ``files/`` and ``iceberg/``, with nothing pending: the file source asks
its paths' location how the store is listed and read (``KEY_LISTING``, ``READ_AHEAD`` in
``storage/location.py``) and opens it through ``storage.file_input.reading_storage``. A question
left for later would be listed in ``PENDING`` (which may only shrink).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import sparklink

PACKAGE_DIR = Path(sparklink.__file__).parent
PACKAGES = ("delta", "files", "iceberg")

#: (file under src/sparklink, the code line's text) still asking, until the seam answers them.
PENDING: set[tuple[str, str]] = set()

STORE_QUESTION = re.compile("|".join((
    r"\bis_local\b",
    r"\bis_object_uri\b",
    r"\bs3 is (?:not )?None\b",
    r"isinstance\([^)]*\b(?:S3|Local|Memory)Location\b",
    r"""startswith\(\s*\(?\s*[rbf]?['"](?:s3a?|s3n|file|gs|abfss?|hdfs|memory)\b""",
    r"\bscheme\b\s*(?:==|!=|\bin\b|\bnot in\b)",
    r"\b(?:S3_SCHEMES|OBJECT_STORE_SCHEMES)\b",
)))


def _docstring_lines(tree: ast.AST) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                lines.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    return lines


def store_questions(package: str) -> list[tuple[str, int, str]]:
    found = []
    for path in sorted((PACKAGE_DIR / package).rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        skip = _docstring_lines(ast.parse(text))
        for number, line in enumerate(text.splitlines(), 1):
            code = line.split("#", 1)[0].strip()
            if number not in skip and STORE_QUESTION.search(code):
                found.append((str(path.relative_to(PACKAGE_DIR)), number, code))
    return found


def test_no_connector_asks_which_store_a_path_is_on():
    asking = [f"src/sparklink/{file}:{number}: {code}" for package in PACKAGES
              for file, number, code in store_questions(package) if (file, code) not in PENDING]
    assert not asking, ("a store question above storage/ (ask the storage seam instead: open_storage, "
                        "storage.uris, the location's methods; ARCHITECTURE.md):\n" + "\n".join(asking))


def test_the_pending_list_names_only_questions_still_asked():
    """A question the seam now answers leaves PENDING too (the list only shrinks)."""
    asked = {(file, code) for package in PACKAGES for file, _, code in store_questions(package)}
    assert not PENDING - asked, f"no longer asked, remove from PENDING: {sorted(PENDING - asked)}"


def test_the_check_sees_a_store_question():
    for line in ('if location.scheme == "s3":', "if self.s3 is None:", "if is_local(uri):",
                 'if path.startswith("s3a://"):', "isinstance(loc, S3Location)"):
        assert STORE_QUESTION.search(line), line
