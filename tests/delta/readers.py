"""What delta-rs (a reader nobody here wrote) sees in a Delta table; used by the Delta tests."""

from __future__ import annotations

from pathlib import Path

from deltalake import DeltaTable


def delta_ids(path: str | Path, column: str = "id") -> list[int]:
    """Sorted values of ``column`` in the table's latest version, read by delta-rs."""
    return sorted(DeltaTable(str(path)).to_pyarrow_table().column(column).to_pylist())


def unreferenced_files(path: str | Path) -> list[str]:
    """Data files under the table that its latest version does not reference (a failed
    attempt's leftovers), relative to the table."""
    root = Path(path)
    if not (root / "_delta_log").is_dir():
        return sorted(p.relative_to(root).as_posix() for p in root.rglob("*.parquet"))
    referenced = set(DeltaTable(str(root)).get_add_actions(flatten=True).column("path").to_pylist())
    return sorted(rel for rel in (p.relative_to(root).as_posix() for p in root.rglob("*.parquet")
                                  if "_delta_log" not in p.parts) if rel not in referenced)
