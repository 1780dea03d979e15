"""Every connector sparklink ships: the one list that registration, the generated option docs,
the end of input and ``sparklink run --check`` read (see :mod:`sparklink.contract` and
ARCHITECTURE.md, "Adding a connector").

It imports each connector package's ``__init__`` only (where its ``CONNECTOR`` is declared,
as data), none of a connector's modules or dependencies. Runs wherever it is imported.
"""

from __future__ import annotations

from collections.abc import Mapping

from sparklink import cassandra, delta, examples, files, iceberg, kafka, postgres
from sparklink.contract import ConnectorSpec, FormatSpec

#: In registration order (the SDK's examples first).
CONNECTORS: tuple[ConnectorSpec, ...] = (
    examples.CONNECTOR,
    files.CONNECTOR,
    postgres.CONNECTOR,
    kafka.CONNECTOR,
    delta.CONNECTOR,
    iceberg.CONNECTOR,
    cassandra.CONNECTOR,
)


def formats() -> tuple[FormatSpec, ...]:
    """Every format of every connector, in registration order."""
    return tuple(spec for connector in CONNECTORS for spec in connector.formats)


def format_named(name: str) -> FormatSpec | None:
    """The format ``name`` (as ``.format(...)`` spells it), None when sparklink has none."""
    return next((spec for spec in formats() if spec.name == name), None)


def end_of_input_actions() -> Mapping[str, str]:
    """Every end-of-input action the connectors declare: kind -> reference to its callable."""
    return {kind: ref for connector in CONNECTORS for kind, ref in connector.end_of_input.items()}
