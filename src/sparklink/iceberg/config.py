"""Options of ``sparklink.iceberg`` that the sink and the source share: the table and its
catalog (parsed on the driver, pickled to executors). The sink adds ``appId``; the source's own
options are in :mod:`sparklink.iceberg.source`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from sparklink.errors import ConfigError
from sparklink.options import Option, OptionTable, SparkOptions, string

CATALOG_PREFIX = "catalog."
DEFAULT_CATALOG_NAME = "default"
MAIN_BRANCH = "main"


class IcebergTableOptions(OptionTable):
    """The table and its catalog: the options the sink and the source share. Every other
    ``catalog.*`` option is a property for ``pyiceberg.catalog.load_catalog``."""

    passthrough_prefixes = (CATALOG_PREFIX,)
    passthrough_doc = (("catalog.<property>", "handed to `load_catalog` as the property `<property>`: `catalog.type` "
                        "(`sql`, `rest`, `hive`, `glue`, ...), `catalog.uri`, `catalog.warehouse`, and the catalog's "
                        "others, FileIO properties included (`catalog.s3.endpoint`, ...); the executors open the "
                        "same FileIO with them"),)
    table = Option("table", string("`namespace.name`"), required=True,
                   doc="the table (a nested namespace: `a.b.name`)")
    catalog_name = Option("catalog.name", string("a catalog name"), default=DEFAULT_CATALOG_NAME,
                          doc="the catalog's name, as `load_catalog(name, ...)` takes it (it also selects a catalog "
                              "of that name in `.pyiceberg.yaml` or `PYICEBERG_CATALOG__<NAME>__*` variables)")


class IcebergSinkOptions(IcebergTableOptions):
    """``sparklink.iceberg`` as a sink."""

    app_id = Option("appId", string("an application id"), default_doc="made per checkpoint",
                    doc="the application id written into every snapshot's summary (see "
                        "[Commit protocol](#commit-protocol))")
    branch = Option("branch", string("a branch name"), default=MAIN_BRANCH,
                    doc="the branch the sink commits to; a missing one is created from the table's current snapshot "
                        "before the first commit (a table without a snapshot cannot fork one: write to `main` first; "
                        "a tag of that name is refused)")
    checkpoint_location = SparkOptions.checkpoint_location.documented(
        "Spark's checkpoint; the sink keeps its identity file and commit log in it", default_doc="required for streams")


TABLE, CATALOG_NAME = IcebergTableOptions.table.key, IcebergTableOptions.catalog_name.key
BRANCH = IcebergSinkOptions.branch.key  # the source's has the same key


def split_catalog_options(options: Mapping[str, str]) -> tuple[str, str, dict[str, str], dict[str, str]]:
    """``(table, catalog name, catalog properties, the other options)`` of a connector's options."""
    table = None
    catalog_name = DEFAULT_CATALOG_NAME
    properties: dict[str, str] = {}
    others: dict[str, str] = {}
    for key, value in options.items():
        lowered = key.lower()
        if lowered == TABLE.lower():
            table = value
        elif lowered == CATALOG_NAME.lower():
            catalog_name = value
        elif lowered.startswith(CATALOG_PREFIX):
            # Spark lower-cases option keys; pyiceberg's property names are lower case too
            properties[key[len(CATALOG_PREFIX):]] = value
        else:
            others[key] = value
    if not table:
        raise ConfigError(TABLE, "is required", "namespace.name, e.g. db.events")
    parts = table.split(".")
    if len(parts) < 2 or any(not p for p in parts):
        raise ConfigError(TABLE, f"'{table}' is not namespace.name", "e.g. db.events")
    if not catalog_name:
        raise ConfigError(CATALOG_NAME, "must not be empty", "e.g. default")
    return table, catalog_name, properties, others


def parse_branch(others: Mapping[str, str]) -> str:
    """The ``branch`` option (default ``main``)."""
    branch = next((v for k, v in others.items() if k.lower() == BRANCH.lower()), MAIN_BRANCH)
    if not branch.strip():
        raise ConfigError(BRANCH, "must not be empty", "a branch name, e.g. main")
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
        app_id = next((v for k, v in others.items() if k.lower() == IcebergSinkOptions.app_id.key.lower()), None)
        if app_id is not None and not app_id.strip():
            raise ConfigError(IcebergSinkOptions.app_id.key, "must not be empty when given")
        parts = table.split(".")
        return cls(namespace=tuple(parts[:-1]), name=parts[-1], catalog_name=catalog_name,
                   catalog_properties=properties, branch=parse_branch(others), app_id=app_id)
