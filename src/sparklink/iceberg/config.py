"""Options of ``sparklink.iceberg`` that the sink and the source share: the table and its
catalog (parsed on the driver, pickled to executors). The sink adds ``appId``; the source's own
options are in :mod:`sparklink.iceberg.source`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from sparklink.errors import ConfigError

OPTION_TABLE = "table"
OPTION_CATALOG_PREFIX = "catalog."
OPTION_CATALOG_NAME = "catalog.name"
OPTION_APP_ID = "appId"
OPTION_BRANCH = "branch"
DEFAULT_CATALOG_NAME = "default"
MAIN_BRANCH = "main"


def split_catalog_options(options: Mapping[str, str]) -> tuple[str, str, dict[str, str], dict[str, str]]:
    """``(table, catalog name, catalog properties, the other options)`` of a connector's options."""
    table = None
    catalog_name = DEFAULT_CATALOG_NAME
    properties: dict[str, str] = {}
    others: dict[str, str] = {}
    for key, value in options.items():
        lowered = key.lower()
        if lowered == OPTION_TABLE:
            table = value
        elif lowered == OPTION_CATALOG_NAME:
            catalog_name = value
        elif lowered.startswith(OPTION_CATALOG_PREFIX):
            # Spark lower-cases option keys; pyiceberg's property names are lower case too
            properties[key[len(OPTION_CATALOG_PREFIX):]] = value
        else:
            others[key] = value
    if not table:
        raise ConfigError(OPTION_TABLE, "is required", "namespace.name, e.g. db.events")
    parts = table.split(".")
    if len(parts) < 2 or any(not p for p in parts):
        raise ConfigError(OPTION_TABLE, f"'{table}' is not namespace.name", "e.g. db.events")
    if not catalog_name:
        raise ConfigError(OPTION_CATALOG_NAME, "must not be empty", "e.g. default")
    return table, catalog_name, properties, others


def parse_branch(others: Mapping[str, str]) -> str:
    """The ``branch`` option (default ``main``)."""
    branch = next((v for k, v in others.items() if k.lower() == OPTION_BRANCH), MAIN_BRANCH)
    if not branch.strip():
        raise ConfigError(OPTION_BRANCH, "must not be empty", "a branch name, e.g. main")
    return branch


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


@dataclass(frozen=True, kw_only=True)
class IcebergSinkConfig(IcebergTableConfig):
    """The table and catalog, and the application id the user fixed (None: one is made and
    kept in the checkpoint)."""

    app_id: str | None = None

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> "IcebergSinkConfig":
        table, catalog_name, properties, others = split_catalog_options(options)
        app_id = next((v for k, v in others.items() if k.lower() == OPTION_APP_ID.lower()), None)
        if app_id is not None and not app_id.strip():
            raise ConfigError(OPTION_APP_ID, "must not be empty when given")
        parts = table.split(".")
        return cls(namespace=tuple(parts[:-1]), name=parts[-1], catalog_name=catalog_name,
                   catalog_properties=properties, branch=parse_branch(others), app_id=app_id)
