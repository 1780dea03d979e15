"""Connection settings for PostgreSQL: the DSN, its redaction, and opening connections.

A DSN may carry a password (``password=...`` or ``postgresql://user:secret@host/db``). The
password must never reach a log line, an error message or a persisted file, so every
connection is opened through :class:`ConnectionSettings`, whose ``repr`` and error messages
use :func:`redact_dsn` and :func:`scrub`. Runs on the driver and on executors, wherever a
connection is opened; objects of this module are small and picklable (no live handle).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import psycopg
from psycopg import conninfo

from sparklink.errors import ConfigError, SparklinkError
from sparklink.options import Option, OptionTable, string


class PostgresConnectionOptions(OptionTable):
    """The option every ``sparklink.postgres`` table (sink and source) has."""

    dsn = Option("dsn", string("libpq connection string or URL"), required=True, secret=True,
                 doc="`host=... user=... password=...` or a URL. Its password never appears in logs, error messages, "
                     "commit logs or reprs; prefer `~/.pgpass` or `PGPASSWORD` on the executors, as Spark itself may "
                     "print a query's options")


DSN = PostgresConnectionOptions.dsn.key
REDACTED = "***"
APPLICATION_NAME = "sparklink"

_KV_PASSWORD = re.compile(r"(?i)(\bpassword\s*=\s*)(?!\*\*\*)('(?:[^'\\]|\\.)*'|\S+)")
_URL_PASSWORD = re.compile(r"(?i)(\b[a-z][a-z0-9+.-]*://[^:/?#@\s]*:)([^@\s]*)(@)")
_URL_QUERY_PASSWORD = re.compile(r"(?i)([?&]password=)([^&\s]*)")


class PostgresError(SparklinkError):
    """A PostgreSQL operation failed; the message never contains the DSN's password."""


def redact_dsn(dsn: str) -> str:
    """The DSN with any password replaced by ``***`` (key=value and URL forms)."""
    text = _URL_PASSWORD.sub(lambda m: m.group(1) + REDACTED + m.group(3), dsn)
    text = _URL_QUERY_PASSWORD.sub(lambda m: m.group(1) + REDACTED, text)
    return _KV_PASSWORD.sub(lambda m: m.group(1) + REDACTED, text)


def _password_of(dsn: str) -> str | None:
    try:
        value = conninfo.conninfo_to_dict(dsn).get("password")
    except psycopg.Error:
        value = None
    if value:
        return str(value)
    match = _KV_PASSWORD.search(dsn) or _URL_PASSWORD.search(dsn)
    if match:
        return match.group(2).strip("'")
    return None


@dataclass(frozen=True, kw_only=True)
class ConnectionSettings:
    """Where and how to connect. ``repr`` shows the redacted DSN only."""

    dsn: str = field(repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.dsn, str) or not self.dsn.strip():
            raise ConfigError(DSN, "must be a non-empty libpq connection string or URL")
        try:
            conninfo.conninfo_to_dict(self.dsn)
        except psycopg.Error as exc:
            raise ConfigError(DSN, f"is not a valid connection string ({self.scrub(str(exc))}): "
                                          f"{redact_dsn(self.dsn)}") from None

    def __repr__(self) -> str:
        return f"ConnectionSettings(dsn={redact_dsn(self.dsn)!r})"

    @property
    def redacted(self) -> str:
        return redact_dsn(self.dsn)

    def scrub(self, text: str) -> str:
        """``text`` with this DSN's password (and any password-looking part) removed."""
        password = _password_of(self.dsn)
        if password:
            text = text.replace(password, REDACTED)
        return redact_dsn(text)

    def error(self, doing: str, exc: BaseException) -> PostgresError:
        """A PostgresError for ``exc`` that says what failed, with secrets scrubbed."""
        return PostgresError(f"PostgreSQL ({self.redacted}): {doing} failed: {self.scrub(str(exc)).strip()}")

    def connect(self, *, autocommit: bool = False, read_only: bool = False) -> psycopg.Connection:
        """A new connection (caller closes it). Errors are PostgresError without the password,
        and are not chained to psycopg's exception (whose text could hold the DSN).

        ``read_only``: every transaction of the session is read-only (``SET SESSION
        CHARACTERISTICS``), autocommit statements included; the server refuses any write."""
        try:
            conn = psycopg.connect(self.dsn, autocommit=autocommit, application_name=APPLICATION_NAME)
        except psycopg.Error as exc:
            raise self.error("connecting", exc) from None
        if read_only:
            try:
                conn.execute("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY")
                if not autocommit:
                    conn.commit()
            except psycopg.Error as exc:
                conn.close()
                raise self.error("making the session read-only", exc) from None
        return conn

    async def connect_async(self, *, autocommit: bool = True) -> psycopg.AsyncConnection:
        try:
            return await psycopg.AsyncConnection.connect(self.dsn, autocommit=autocommit,
                                                         application_name=APPLICATION_NAME)
        except psycopg.Error as exc:
            raise self.error("connecting", exc) from None
