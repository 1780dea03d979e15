"""Idempotent ``df.write`` for every sparklink sink: options ``txnAppId`` / ``txnVersion``, as
Delta's writer options (driver side; used by :mod:`sparklink.spark.data_source` and
:mod:`sparklink.spark.sink_adapter`).

Inside ``foreachBatch``, a restarted query replays the micro-batch it did not finish, and a
plain ``df.write`` in it would write the rows again. With
``.option("txnAppId", app).option("txnVersion", batch_id)`` the write is recorded as
``(app, version)`` atomically with the sink's own commit, and a write whose pair is already
recorded is skipped (logged at WARNING: ``... is already committed; skipped``).

Where the record lives, per sink:

* a sink with a commit log (the file sink): the job's commit log entry is named after the
  pair (``commits/job-txn-<app>-<version>.json``); creating it is the commit's decision, so
  the record and the commit are one atomic step (a crash after it is rolled forward);
* a sink without one overrides :meth:`~sparklink.sink.sink.Sink.txn_committed` and
  :meth:`~sparklink.sink.sink.Sink.record_txn` (PostgreSQL ``semantic=upsert``: a row in
  ``sparklink_txns`` written after the commit; a crash between the two makes the replay rewrite
  the same rows, which an upsert does idempotently);
* a sink that cannot record the pair with its commit refuses the options, naming them.

The options are taken out before the sink sees its options, and refused on ``writeStream``
(a streaming query is already exactly-once through its checkpoint).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass

from sparklink.errors import ConfigError
from sparklink.options import Applies, Option, OptionTable, integer, string

_WRITE_ONLY = Applies("mode", ("write",), "applies to df.write (e.g. inside foreachBatch), not to df.writeStream, "
                      "whose checkpoint already commits every micro-batch once", "`df.write`")


class TxnOptions(OptionTable):
    """The SDK's idempotent-write options, which every sink's table includes."""

    group = ("`df.write` only (refused for streams), both together: an idempotent write (e.g. in `foreachBatch`, "
             "version = batch id), skipped when the pair is already committed")
    group_default = "none"

    txn_app_id = Option("txnAppId", string("an application name"), applies=_WRITE_ONLY,
                        doc="with `txnVersion`: an idempotent write, skipped when the pair is already committed")
    txn_version = Option("txnVersion", integer(0), applies=_WRITE_ONLY,
                         doc="with `txnAppId`: the write's version (e.g. foreachBatch's batch id)")


TXN_APP_ID, TXN_VERSION = TxnOptions.txn_app_id.key, TxnOptions.txn_version.key
TXN_OPTIONS = TxnOptions.keys()
_SAFE = re.compile(r"^[0-9a-zA-Z_-]{1,64}$")


@dataclass(frozen=True, kw_only=True)
class Txn:
    """One idempotent write: the application and its version (e.g. the micro-batch id)."""

    app_id: str
    version: int

    @property
    def job_id(self) -> str:
        """A commit-log job id unique to the pair (letters, digits, ``_`` and ``-``)."""
        app = self.app_id if _SAFE.match(self.app_id) else hashlib.sha256(self.app_id.encode()).hexdigest()[:32]
        return f"txn-{app}-{self.version}"

    def __str__(self) -> str:
        return f"txnAppId={self.app_id!r} txnVersion={self.version}"


def split_txn_options(options: Mapping[str, str]) -> tuple[Txn | None, dict[str, str]]:
    """The write's :class:`Txn` (None without the options) and the other options."""
    rest: dict[str, str] = {}
    found: dict[str, str] = {}
    for key, value in options.items():
        name = next((o for o in TXN_OPTIONS if o.lower() == key.lower()), None)
        if name is None:
            rest[key] = value
        else:
            found[name] = value
    if not found:
        return None, rest
    for name in TXN_OPTIONS:
        if name not in found:
            other = next(iter(found))
            raise ConfigError(name, f"is required with option '{other}' (both name one idempotent write)")
    app_id = found[TXN_APP_ID].strip()
    if not app_id:
        raise ConfigError(TXN_APP_ID, "is empty", "an application name, e.g. the query's name")
    try:
        version = int(found[TXN_VERSION].strip())
    except ValueError:
        raise ConfigError(TXN_VERSION, f"'{found[TXN_VERSION]}' is not a whole number",
                          "0 or more, e.g. foreachBatch's batch id") from None
    if version < 0:
        raise ConfigError(TXN_VERSION, f"'{version}' is negative", "0 or more, e.g. foreachBatch's batch id")
    return Txn(app_id=app_id, version=version), rest


def refuse_in_stream(txn: Txn | None) -> None:
    """``writeStream`` with the options: refused (the checkpoint already makes it exactly-once)."""
    if txn is not None:
        raise TxnOptions.txn_app_id.inapplicable("df.writeStream")
