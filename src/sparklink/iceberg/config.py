"""Options of ``sparklink.iceberg`` that the sink and the source share: the table and its
catalog (parsed on the driver, pickled to executors). The sink adds ``appId``, ``branch`` and the
SDK's ``txnAppId`` / ``txnVersion``; the source's own options are in
:mod:`sparklink.iceberg.source`. Every option goes through its :class:`OptionTable`: an unknown key
(``brnach``) is refused with the closest known one, never ignored."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from sparklink.errors import ConfigError
from sparklink.options import Option, Options, OptionTable, SparkOptions, custom
from sparklink.sink.changelog import Changelog, ChangelogOptions
from sparklink.sink.txn import Txn, TxnOptions, split_txn_options

CATALOG_PREFIX = "catalog."
DEFAULT_CATALOG_NAME = "default"
MAIN_BRANCH = "main"


def _table_name(key: str, value: str) -> str:
    parts = value.split(".")
    if len(parts) < 2 or any(not p.strip() for p in parts):
        raise ConfigError(key, f"'{value}' is not namespace.name", "e.g. db.events")
    return value


def _named(what: str, example: str):
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
    catalog_name = Option("catalog.name", custom(_named("a catalog name", "default"), "a catalog name"),
                          default=DEFAULT_CATALOG_NAME,
                          doc="the catalog's name, as `load_catalog(name, ...)` takes it (it also selects a catalog "
                              "of that name in `.pyiceberg.yaml` or `PYICEBERG_CATALOG__<NAME>__*` variables)")


BRANCH_PARSER = custom(_named("a branch name", "main"), "a branch name")


def _iceberg_filter(key: str, value: str) -> str:
    """An Iceberg filter expression as pyiceberg parses it (``region = 'eu'``, ``day >= '2026-11-01'``)."""
    from pyiceberg.expressions.parser import parse

    try:
        parse(value)
    except Exception as exc:  # noqa: BLE001 - pyparsing's and pyiceberg's errors: one message naming the option
        raise ConfigError(key, f"'{value}' is not an Iceberg filter expression ({type(exc).__name__}: {exc})",
                          "e.g. region = 'eu' and day >= '2026-11-01'") from None
    return value


class IcebergSinkOptions(IcebergTableOptions, TxnOptions, ChangelogOptions):
    """``sparklink.iceberg`` as a sink."""

    app_id = Option("appId", custom(_named("an application id", "orders-app"), "an application id"),
                    default_doc="made per checkpoint",
                    doc="the application id written into every snapshot's summary (see "
                        "[Commit protocol](#commit-protocol))")
    branch = Option("branch", BRANCH_PARSER, default=MAIN_BRANCH,
                    doc="the branch the sink commits to; a missing one is created from the table's current snapshot "
                        "before the first commit (a table without a snapshot cannot fork one: write to `main` first; "
                        "a tag of that name is refused)")
    overwrite_filter = Option("overwriteFilter", custom(_iceberg_filter, "an Iceberg filter expression"),
                              default_doc="the whole table",
                              doc="`df.write` with `mode(\"overwrite\")` only: the rows this filter matches are "
                                  "replaced by the write's rows, in one commit (Iceberg's Spark "
                                  "`overwrite(condition)`); pyiceberg's expression syntax, e.g. `region = 'eu'`")
    checkpoint_location = SparkOptions.checkpoint_location.documented(
        "Spark's checkpoint; the sink keeps its identity file and commit log in it", default_doc="required for streams")


TABLE, CATALOG_NAME = IcebergTableOptions.table.key, IcebergTableOptions.catalog_name.key
BRANCH = IcebergSinkOptions.branch.key  # the source's has the same key


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


@dataclass(frozen=True, kw_only=True)
class IcebergSinkConfig(IcebergTableConfig):
    """The table and catalog, the application id the user fixed (None: one is made and kept in
    the checkpoint) and a ``df.write``'s ``txnAppId`` / ``txnVersion`` (None without them)."""

    app_id: str | None = None
    txn: Txn | None = None
    changelog: Changelog | None = None
    overwrite_filter: str | None = None

    @classmethod
    def from_options(cls, raw: Mapping[str, str] | None) -> "IcebergSinkConfig":
        given = Options(raw)
        if "path" in given:  # .save("...") sets it
            raise ConfigError("path", f"sparklink.iceberg writes the table named by the 'table' option, not a path "
                              f"(got '{given['path']}')", "e.g. .option('table', 'db.events').save()")
        options = IcebergSinkOptions.options(given)
        namespace, name, catalog_name, properties = table_and_catalog(options)
        txn, _rest = split_txn_options(options)
        return cls(namespace=namespace, name=name, catalog_name=catalog_name, catalog_properties=properties,
                   branch=IcebergSinkOptions.branch.value(options), app_id=IcebergSinkOptions.app_id.get(options),
                   txn=txn, changelog=Changelog.from_options(options),
                   overwrite_filter=IcebergSinkOptions.overwrite_filter.get(options))
