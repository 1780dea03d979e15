"""The harness itself: a real PostgreSQL server, and a runtime that never imports the harness."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import sparklink

PACKAGE_DIR = Path(sparklink.__file__).parent


def test_postgres_fixture_allows_prepared_transactions(postgres):
    with postgres.connect() as conn:
        assert int(conn.execute("SHOW max_prepared_transactions").fetchone()[0]) > 0
        assert conn.execute("SELECT inet_server_addr()::text").fetchone()[0].startswith("127.0.0.1")


def test_importing_every_runtime_module_loads_no_harness():
    """A fresh interpreter imports every module of the installed package outside
    sparklink.testing (CLI, connectors, SDK, Spark adapters); the harness and pytest stay unloaded."""
    script = """
import pkgutil, sys
import sparklink
names = []
def walk(package):  # pkgutil.walk_packages would import sparklink.testing to look inside it
    for module in pkgutil.iter_modules(package.__path__, package.__name__ + "."):
        if module.name == "sparklink.testing":
            continue
        names.append(module.name)
        imported = __import__(module.name, fromlist=["_"])
        if module.ispkg:
            walk(imported)
walk(sparklink)
sparklink.register  # the public entry point is there
loaded = sorted(n for n in sys.modules if n.startswith("sparklink.testing") or n == "pytest")
print(len(names), loaded)
assert not loaded, loaded
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            env={k: v for k, v in os.environ.items() if not k.startswith("SPARKLINK_")})
    assert result.returncode == 0, result.stdout + result.stderr
    count = int(result.stdout.split()[0])
    assert count > 50, result.stdout  # every runtime module was imported, not a handful


def _harness_imports(path: Path) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = ([node.module or ""] if isinstance(node, ast.ImportFrom)
                 else [a.name for a in node.names] if isinstance(node, ast.Import) else [])
        found.extend((node.lineno, n) for n in names if n.startswith("sparklink.testing"))
    return found


#: The runtime's ways into the harness, each lazy and with its reason (ARCHITECTURE.md, "Layers"):
#: the fault-point hook, only when a test armed a fault through SPARKLINK_FAULT (sparklink/faults.py
#: says why); ``sparklink demo --s3``, a showcase that starts the harness's private S3 server on
#: purpose (no connector, no other command reaches it).
HARNESS_DOORS = {"faults.py": ["sparklink.testing.faults"], "cli/demo_s3.py": ["sparklink.testing.seaweedfs"]}


def test_no_runtime_source_imports_the_harness():
    """Not even lazily, but through the doors of HARNESS_DOORS."""
    offenders = {}
    for path in PACKAGE_DIR.rglob("*.py"):
        relative = path.relative_to(PACKAGE_DIR).as_posix()
        if relative.startswith("testing/") or relative in HARNESS_DOORS:
            continue
        if imports := _harness_imports(path):
            offenders[relative] = imports
    assert offenders == {}
    for relative, names in HARNESS_DOORS.items():
        assert [name for _, name in _harness_imports(PACKAGE_DIR / relative)] == names


def test_armed_faults_reach_the_shared_sessions_tasks(spark, armed, tmp_path):
    """The ``armed`` fixture is what the in-session task-failure tests rely on: a point armed for
    every attempt fails the query after Spark's retries (so the fault did fire in the tasks);
    nothing is armed once the block is left."""
    import pytest

    from sparklink.testing.conformance.jobs import sequence_to_sink
    from sparklink.testing.conformance.outputs import plain_reader_ids

    args = {"fmt": "sparklink.files", "checkpoint": str(tmp_path / "ck"),
            "options": {"path": str(tmp_path / "out"), "format": "parquet", "bucketAssigner": "basepath"}}
    with armed("writer.after_write:raise"), pytest.raises(Exception, match="fault injected at 'writer.after_write'"):
        sequence_to_sink(spark, **args)
    sequence_to_sink(spark, **args)
    assert plain_reader_ids(tmp_path / "out") == list(range(300))
