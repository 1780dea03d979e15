"""Options of ``sparklink.iceberg`` that the sink and the source share: the table and its
catalog (parsed on the driver, pickled to executors). The sink's own options (``appId``,
``branch``, the changelog's and the SDK's ``txnAppId`` / ``txnVersion``) are in
:mod:`sparklink.iceberg.sink_config`, so that planning a read imports nothing of the sink; the
source's own options are in :mod:`sparklink.iceberg.source`. Every option goes through its
:class:`OptionTable`: an unknown key (``brnach``) is refused with the closest known one, never
ignored."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from sparklink.errors import ConfigError
from sparklink.options import Option, Options, OptionTable, custom

CATALOG_PREFIX = "catalog."
DEFAULT_CATALOG_NAME = "default"
MAIN_BRANCH = "main"


def _table_name(key: str, value: str) -> str:
    parts = value.split(".")
    if len(parts) < 2 or any(not p.strip() for p in parts):
        raise ConfigError(key, f"'{value}' is not namespace.name", "e.g. db.events")
    return value


def named_value(what: str, example: str):
    """A parser of a non-empty name (a table, catalog, branch or application id) for `custom`."""
    def parse(key: str, value: str) -> str:
        if not value.strip():
            raise ConfigError(key, "must not be empty", f"{what}, e.g. {example}")
        return value
    return parse


class IcebergTableOptions(OptionTable):
    """The table and its catalog: the options the sink and the source share. Every other
    ``catalog.*`` option is a property for ``pyiceberg.catalog.load_catalog``."""

    passthrough_prefixes = (CATALOG_PREFIX,)
    passthrough_doc = (("catalog.<property>", "handed to `load_catalog` as the property `<property>`: `catalog.type` "
                        "(`sql`, `rest`, `hive`, `glue`, ...), `catalog.uri`, `catalog.warehouse`, and the catalog's "
                        "others, FileIO properties included (`catalog.s3.endpoint`, ...); the executors open the "
                        "same FileIO with them"),)
    table = Option("table", custom(_table_name, "`namespace.name`"), required=True,
                   doc="the table (a nested namespace: `a.b.name`)")
    catalog_name = Option("catalog.name", custom(named_value("a catalog name", "default"), "a catalog name"),
                          default=DEFAULT_CATALOG_NAME,
                          doc="the catalog's name, as `load_catalog(name, ...)` takes it (it also selects a catalog "
                              "of that name in `.pyiceberg.yaml` or `PYICEBERG_CATALOG__<NAME>__*` variables)")


BRANCH_PARSER = custom(named_value("a branch name", "main"), "a branch name")


TABLE, CATALOG_NAME = IcebergTableOptions.table.key, IcebergTableOptions.catalog_name.key


def table_and_catalog(options: Options) -> tuple[tuple[str, ...], str, str, dict[str, str]]:
    """``(namespace, name, catalog name, catalog properties)`` of options already checked by
    the connector's :class:`OptionTable` (unknown keys refused there)."""
    table = IcebergTableOptions.table.value(options)
    catalog_name = IcebergTableOptions.catalog_name.value(options)
    properties: dict[str, str] = {}
    for key in options:
        if key.lower().startswith(CATALOG_PREFIX) and key.lower() != CATALOG_NAME.lower():
            # Spark lower-cases option keys; pyiceberg's property names are lower case too
            properties[key[len(CATALOG_PREFIX):]] = options[key]
    parts = table.split(".")
    return tuple(parts[:-1]), parts[-1], catalog_name, properties


@dataclass(frozen=True, kw_only=True)
class IcebergTableConfig:
    """``namespace`` / ``name`` of the table, the catalog's name and properties (handed to
    ``pyiceberg.catalog.load_catalog``; never logged: they may hold credentials)."""

    namespace: tuple[str, ...]
    name: str
    catalog_name: str = DEFAULT_CATALOG_NAME
    catalog_properties: Mapping[str, str] = field(default_factory=dict, repr=False)
    branch: str = MAIN_BRANCH

    @property
    def identifier(self) -> tuple[str, ...]:
        return (*self.namespace, self.name)

    @property
    def table_name(self) -> str:
        return ".".join(self.identifier)

    def load_catalog(self):
        """The catalog (driver side). Its properties are never put into messages."""
        from pyiceberg.catalog import load_catalog

        try:
            return load_catalog(self.catalog_name, **dict(self.catalog_properties))
        except (ValueError, ImportError, NotImplementedError) as exc:
            raise ConfigError("catalog.*", f"catalog '{self.catalog_name}' could not be loaded ({type(exc).__name__}: "
                              f"{exc})", "catalog.type and catalog.uri (and the catalog's other properties), "
                              "or a catalog of that name in .pyiceberg.yaml / PYICEBERG_CATALOG__* variables") from None
