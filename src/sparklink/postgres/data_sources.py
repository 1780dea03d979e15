"""Registration of the ``sparklink.postgres`` format."""

from __future__ import annotations


def data_sources() -> list[type]:
    return []  # filled in by the PostgreSQL connectors (issue 6)
