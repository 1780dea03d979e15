"""Reading Iceberg tables in tests with pyiceberg's own scan (never sparklink's code)."""

from __future__ import annotations

from pathlib import Path


def catalog_options(root: Path, table: str = "db.events") -> dict:
    """Options of a fresh table on a sqlite SQL catalog with a local warehouse under ``root``."""
    (root / "warehouse").mkdir(parents=True, exist_ok=True)
    return {"table": table, "catalog.type": "sql", "catalog.uri": f"sqlite:///{root}/catalog.db",
            "catalog.warehouse": f"file://{root}/warehouse"}


def load_table(options: dict):
    from pyiceberg.catalog import load_catalog

    properties = {k[len("catalog."):]: v for k, v in options.items() if k.startswith("catalog.") and k != "catalog.name"}
    catalog = load_catalog(options.get("catalog.name", "default"), **properties)
    return catalog.load_table(options["table"])


def table_exists(options: dict) -> bool:
    from pyiceberg.catalog import load_catalog

    properties = {k[len("catalog."):]: v for k, v in options.items() if k.startswith("catalog.") and k != "catalog.name"}
    return load_catalog(options.get("catalog.name", "default"), **properties).table_exists(options["table"])


def scan_ids(options: dict, column: str = "id") -> list[int]:
    """Sorted ids pyiceberg's scan reads (an absent table reads as empty)."""
    if not table_exists(options):
        return []
    return sorted(load_table(options).scan().to_arrow().column(column).to_pylist())


def sparklink_snapshots(options: dict) -> list[dict]:
    """Summaries of the current snapshot's ancestry, oldest first."""
    from pyiceberg.table.snapshots import ancestors_of

    table = load_table(options)
    return [dict(s.summary.additional_properties) | {"operation": s.summary.operation.value}
            for s in reversed(list(ancestors_of(table.current_snapshot(), table.metadata)))]
