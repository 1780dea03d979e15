"""The connector contract: what a connector package declares about itself, in one place.

Each connector package (``sparklink.<name>``) has, in its ``__init__.py``, one
``CONNECTOR = ConnectorSpec(...)``: its formats (a format is what ``spark.read.format(name)``
and ``df.write.format(name)`` name), each format's source and sink, their option tables (and the
docs page each table is generated into), the sink's capabilities, and the end-of-input actions
its sinks may note. :mod:`sparklink.connectors` lists every ``CONNECTOR``; registration
(``sparklink.register``), the generated option tables (:mod:`sparklink.options_doc`), the end of
input (:mod:`sparklink.spark.end_of_input`) and ``sparklink run --check``
(:mod:`sparklink.cli.pipeline_check`) read that one list. See ARCHITECTURE.md, "Adding a
connector".

Everything here is data: the code a spec names is given as ``"module:attribute"`` references,
imported only when used, so that reading the list imports no connector's dependencies
(deltalake, pyiceberg, confluent-kafka, psycopg, the Cassandra driver). Runs wherever it is
imported (driver or executor); it imports nothing of sparklink.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


def resolve(ref: str) -> Any:
    """The object a ``"module:attribute"`` reference names (``attribute`` may be dotted:
    ``"pkg.mod:Class.method"``)."""
    module_name, colon, path = ref.partition(":")
    if not colon or not module_name or not path:
        raise ValueError(f"'{ref}' is not a reference of the form 'module:attribute'")
    target: Any = importlib.import_module(module_name)
    for part in path.split("."):
        target = getattr(target, part)
    return target


@dataclass(frozen=True)
class LazyFactory:
    """A Source or Sink class named by a ``"module:Class"`` reference, imported when first called
    (``LazyFactory(ref)(*args)`` is ``resolve(ref)(*args)``). Registration hands these to
    :func:`sparklink.spark.as_data_source` instead of the classes: PySpark pickles each format's
    DataSource class, and a class held by it is pickled as a reference that unpickling imports.
    Each streaming query is planned in a fresh Python process that unpickles the class, so holding
    ``sparklink.delta``'s sink class imported the sink, its writer and every file format there
    (about 0.2 s per query) to read a table. A reference is a string: the process imports what it
    calls. Runs wherever it is called (driver, planning process)."""

    ref: str

    def resolve(self) -> Any:
        return resolve(self.ref)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.resolve()(*args, **kwargs)


@dataclass(frozen=True)
class OptionsDoc:
    """An option table and where its generated Markdown table goes: ``table`` is a reference to
    an :class:`sparklink.options.OptionTable` subclass, ``doc`` a file under the repository
    root, ``marker`` the name in its ``<!-- options:NAME ... -->`` markers (both None: the table
    is not generated into the docs, as for the SDK's examples)."""

    table: str
    doc: str | None = None
    marker: str | None = None

    def __post_init__(self) -> None:
        if (self.doc is None) != (self.marker is None):
            raise ValueError(f"{self.table}: a docs file needs its marker name, and a marker its file")


@dataclass(frozen=True, kw_only=True)
class FormatSpec:
    """One format of a connector.

    * ``source``: a reference to a Source subclass or a callable ``options -> Source``; None for
      a write-only format.
    * ``sink``: a reference to a Sink subclass or a callable ``(options, schema) -> Sink``; None
      for a read-only format.
    * ``source_options`` / ``sink_options``: the option tables; every key outside them is
      refused with a did-you-mean.
    * ``sink_check``: a reference to a callable ``(options, schema)`` that parses the sink's
      options as its constructor does, with no side effect (nothing written, no connection
      opened: ``sparklink run --check``); None: the sink class's own ``validate``.
    * ``records_txn_itself``: the sink records a ``df.write``'s ``txnAppId`` / ``txnVersion`` in
      its own commit (Delta's ``txn`` action, Iceberg's snapshot summary): the Spark adapter
      hands it those options instead of keeping the pair in the SDK (:mod:`sparklink.sink.txn`).
    """

    name: str
    source: str | None = None
    sink: str | None = None
    source_options: OptionsDoc | None = None
    sink_options: OptionsDoc | None = None
    sink_check: str | None = None
    records_txn_itself: bool = False

    def __post_init__(self) -> None:
        if self.source is None and self.sink is None:
            raise ValueError(f"format '{self.name}' declares neither a source nor a sink")
        if (self.source is None) != (self.source_options is None) or (self.sink is None) != (self.sink_options is None):
            raise ValueError(f"format '{self.name}': a source or sink without its option table (or a table without it)")


@dataclass(frozen=True, kw_only=True)
class ConnectorSpec:
    """What one connector package declares (its ``CONNECTOR``).

    * ``package``: the package's name under ``sparklink`` (``"delta"``).
    * ``formats``: its formats.
    * ``end_of_input``: the end-of-input actions its sinks may note
      (:class:`sparklink.sink.sink.EndOfInput` ``kind`` -> a reference to a callable
      ``(target, *, driver, session_drivers, active_queries) -> summary``), run by
      :mod:`sparklink.spark.end_of_input` on the driver's machine when a streaming query ends
      without a crash. ``driver`` is the process that runs it, ``session_drivers`` the drivers
      of the caller's session (:class:`sparklink.sink.lease.DriverIdentity`, found by
      :mod:`sparklink.spark.driver`), ``active_queries`` a callable giving its active query ids.
    """

    package: str
    formats: tuple[FormatSpec, ...]
    end_of_input: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.formats:
            raise ValueError(f"connector '{self.package}' declares no format")
