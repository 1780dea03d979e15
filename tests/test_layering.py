"""The layering that ARCHITECTURE.md states, checked on the code's own imports (Spark-free, seconds).

Every ``import`` and ``from ... import`` of ``src/sparklink`` (lazy ones inside functions too) is
read with ``ast``; each module is placed in a layer; an import may only run to the same layer or
down. Connectors never import one another, and no module is part of an import circle but the
fault-hook pair. A failure names the importing file, its line and the rule it breaks.
"""

from __future__ import annotations

import ast
from pathlib import Path

import sparklink
import sparklink.connectors

PACKAGE_DIR = Path(sparklink.__file__).parent

#: The layers from the bottom up (ARCHITECTURE.md, "Layers"). A module belongs to the first entry
#: whose name is the module or a package above it; connector packages are listed in CONNECTORS.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("foundation", ("sparklink.errors", "sparklink.options", "sparklink.faults", "sparklink.contract",
                    "sparklink.arrow_arrays")),
    ("storage and SDK", ("sparklink.storage", "sparklink.source", "sparklink.sink", "sparklink.asyncio")),
    ("formats", ("sparklink.formats",)),
    ("connectors", ()),  # every package of CONNECTORS
    ("connector list", ("sparklink.connectors",)),
    ("spark adapter", ("sparklink.spark",)),
    ("registration", ("sparklink",)),  # the package's __init__
    ("entry points", ("sparklink.cli", "sparklink.options_doc")),
    ("harness", ("sparklink.testing",)),
]
#: The connector packages: those the connector list names (a package it does not name is in no
#: layer, and test_every_module_has_a_layer fails).
CONNECTORS = tuple(spec.package for spec in sparklink.connectors.CONNECTORS)

#: Imports that run against the layers on purpose, each with its reason.
ALLOWED_UPWARD = {
    # the fault hook: unarmed it is one environment look-up; armed, it loads the harness that decides
    ("sparklink.faults", "sparklink.testing.faults"),
    # `sparklink demo --s3` starts the harness's private S3 server on purpose (tests/test_harness.py)
    ("sparklink.cli.demo_s3", "sparklink.testing.seaweedfs"),
}
#: The one import circle the house keeps (see ALLOWED_UPWARD).
ALLOWED_CIRCLES = [{"sparklink.faults", "sparklink.testing.faults"}]


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE_DIR.rglob("*.py"))}


def layer_of(module: str) -> int:
    parts = module.split(".")
    if len(parts) >= 2 and parts[1] in CONNECTORS:
        return [name for name, _ in LAYERS].index("connectors")
    best = None
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and (best is None or len(prefix) > best[1]):
                best = (index, len(prefix))
    assert best is not None, f"{module} is in no layer: add it to LAYERS in {__file__} and to ARCHITECTURE.md"
    return best[0]


def imports_of(module: str) -> list[tuple[int, str]]:
    """(line, imported sparklink module) for every import in ``module``; ``from a import b`` names
    ``a.b`` where ``b`` is a module, ``a`` otherwise. A bare ``import sparklink`` (the package's
    location, or its version) names nothing above the importer and is left out."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, a.name) for a in node.names if a.name.startswith("sparklink."))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if not (target == "sparklink" or target.startswith("sparklink.")):
                continue
            for alias in node.names:
                candidate = f"{target}.{alias.name}"
                found.append((node.lineno, candidate if candidate in MODULES else target))
    return found


def connector_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) >= 2 and parts[1] in CONNECTORS else None


def test_every_module_has_a_layer():
    for module in MODULES:
        layer_of(module)


def test_imports_run_down_the_layers():
    broken = []
    for module in MODULES:
        for line, target in imports_of(module):
            if target not in MODULES or (module, target) in ALLOWED_UPWARD:
                continue
            if layer_of(target) > layer_of(module):
                broken.append(f"{MODULES[module].relative_to(PACKAGE_DIR.parent)}:{line}: {module} "
                              f"({LAYERS[layer_of(module)][0]}) imports {target} ({LAYERS[layer_of(target)][0]})")
    assert not broken, "imports that run up the layers (see ARCHITECTURE.md):\n" + "\n".join(broken)


def test_connectors_do_not_import_one_another():
    broken = []
    for module in MODULES:
        own = connector_of(module)
        if own is None:
            continue
        for line, target in imports_of(module):
            other = connector_of(target)
            if other is not None and other != own:
                broken.append(f"{MODULES[module].relative_to(PACKAGE_DIR.parent)}:{line}: connector {own} "
                              f"imports connector {other} ({target}); share the piece through a lower layer")
    assert not broken, "\n".join(broken)


def _circles() -> list[set[str]]:
    graph = {m: {t for _, t in imports_of(m) if t in MODULES and t != m} for m in MODULES}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[set[str]] = []

    def visit(node: str) -> None:  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                circles.append(component)

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return circles


def test_no_import_circle_but_the_fault_hook():
    unexpected = [sorted(c) for c in _circles() if c not in ALLOWED_CIRCLES]
    assert not unexpected, f"import circles: {unexpected}"


def test_comments_point_inside_the_repository():
    """Code points to ARCHITECTURE.md or docs/, never to a design file outside the repository."""
    citing = [str(p.relative_to(PACKAGE_DIR.parent)) for p in MODULES.values() if "DESIGN.md" in p.read_text(encoding="utf-8")]
    assert not citing, f"these cite DESIGN.md, which is not in the repository (point to ARCHITECTURE.md or docs/): {citing}"
