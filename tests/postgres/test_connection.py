"""DSN handling: the password never shows up in a repr, an error message or a log line."""

from __future__ import annotations

import logging

import pytest

from sparklink.errors import ConfigError
from sparklink.postgres.connection import ConnectionSettings, PostgresError, redact_dsn
from sparklink.postgres.connector import PostgresSinkConnector
from pyspark.sql.types import LongType, StructField, StructType

SECRET = "s3cr3t-Pa55"


@pytest.mark.parametrize(("dsn", "expected"), [
    ("host=h user=u password=hunter2 dbname=d", "host=h user=u password=*** dbname=d"),
    ("host=h password='with space' dbname=d", "host=h password=*** dbname=d"),
    ("postgresql://u:hunter2@h:5432/d", "postgresql://u:***@h:5432/d"),
    ("postgresql://u@h/d?password=hunter2&sslmode=off", "postgresql://u@h/d?password=***&sslmode=off"),
    ("host=h dbname=d", "host=h dbname=d"),
], ids=["key-value", "quoted", "url", "url-query", "no-password"])
def test_redact_dsn(dsn, expected):
    assert redact_dsn(dsn) == expected


def test_repr_hides_password(postgres):
    settings = ConnectionSettings(dsn=postgres.dsn)
    assert SECRET not in repr(settings)
    assert SECRET not in str(settings)


@pytest.mark.parametrize("form", ["kv", "url"], ids=["key-value", "url"])
def test_wrong_password_error_and_logs_hide_secret(postgres, caplog, form):
    wrong = "Wr0ng-" + SECRET
    dsn = (f"host={postgres.host} port={postgres.port} user={postgres.user} password={wrong} dbname=postgres"
           if form == "kv" else f"postgresql://{postgres.user}:{wrong}@{postgres.host}:{postgres.port}/postgres")
    caplog.set_level(logging.DEBUG)
    with pytest.raises(PostgresError, match="connecting failed") as info:
        ConnectionSettings(dsn=dsn).connect()
    text = str(info.value) + repr(info.value) + "".join(str(a) for a in info.value.args)
    assert wrong not in text and SECRET not in text
    assert info.value.__cause__ is None and info.value.__suppress_context__
    assert wrong not in caplog.text


def test_bad_dsn_is_a_config_error_without_the_password():
    with pytest.raises(ConfigError, match="option 'dsn'") as info:
        ConnectionSettings(dsn="host=h password=hunter2 nonsense_key=1")
    assert "hunter2" not in str(info.value)


def test_sink_errors_and_logs_hide_secret(postgres, caplog, tmp_path):
    caplog.set_level(logging.DEBUG)
    schema = StructType([StructField("id", LongType(), True)])
    options = {"dsn": postgres.dsn, "table": "no_such_schema.t", "semantic": "at-least-once"}
    with pytest.raises(PostgresError, match="preparing table") as info:
        PostgresSinkConnector(options, schema)
    assert SECRET not in str(info.value)
    assert SECRET not in caplog.text
