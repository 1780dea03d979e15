"""Options of ``sparklink.iceberg`` as a sink (parsed on the driver, pickled to executors): the
table and catalog of :mod:`sparklink.iceberg.config`, and ``appId``, ``branch``,
``overwriteFilter``, the changelog's (``writeMode=upsert``) and the SDK's ``txnAppId`` /
``txnVersion``. Apart from the shared table options so that a streaming read's planning process
(a fresh Python process per query) does not import the sink's changelog and commit modules.
Every option goes through its :class:`OptionTable`: an unknown key is refused with the closest
known one, never ignored."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from sparklink.errors import ConfigError
from sparklink.iceberg.config import (
    BRANCH_PARSER,
    MAIN_BRANCH,
    IcebergTableConfig,
    IcebergTableOptions,
    named_value,
    table_and_catalog,
)
from sparklink.options import Option, Options, SparkOptions, custom
from sparklink.sink.changelog import Changelog, ChangelogOptions
from sparklink.sink.txn import Txn, TxnOptions, split_txn_options


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

    app_id = Option("appId", custom(named_value("an application id", "orders-app"), "an application id"),
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
