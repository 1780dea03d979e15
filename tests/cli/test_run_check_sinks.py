"""``sparklink run --check`` parses every sparklink sink's options with the connector's own
option parsing (issue 35 item 9: it said "valid" for bad Delta, Iceberg and Kafka options)."""

from __future__ import annotations

import pytest

from sparklink.cli import run_command
from sparklink.cli.main import build_parser
from sparklink.errors import ConfigError
from sparklink.kafka.security import ClientSecurity
from tests.cli.test_run import write

PIPELINE = """\
[sources.numbers]
format = "sparklink.sequence"
options = {{ numSplits = 1, rowsPerSplit = 10 }}

[transform]
sql = "SELECT id, CAST(id AS STRING) AS value FROM numbers"

[[sinks]]
name = "out"
format = "{format}"
checkpoint = "{ck}"
options = {{ {options} }}
"""


@pytest.mark.parametrize("format, options, message", [
    ("sparklink.delta", 'path = "{tmp}/delta", partitionColumn = "id"',
     "'partitionColumn': unknown option (did you mean 'partitionColumns'?)"),
    ("sparklink.delta", 'path = "{tmp}/delta", partitionColumns = "nosuch"',
     "'partitionColumns': column 'nosuch' is not in the input"),
    ("sparklink.iceberg", 'table = "db.events", "catalog.type" = "sql", brnach = "dev"',
     "'brnach': unknown option (did you mean 'branch'?)"),
    ("sparklink.kafka", '"kafka.bootstrap.servers" = "127.0.0.1:1", topic = "t", semantic = "exactly_once"',
     "'semantic': unknown value 'exactly_once'"),
    ("sparklink.kafka", '"kafka.bootstrap.servers" = "127.0.0.1:1", topic = "t", semantic = "at-least-once", '
     '"kafka.security.protocol" = "ssl", "kafka.ssl.ca.locaton" = "/ca.pem"',
     "'kafka.ssl.ca.locaton': is not a librdkafka setting (did you mean 'kafka.ssl.ca.location'?)"),
    ("sparklink.iceberg", 'table = "db.events", txnAppId = "a", txnVersion = "1"',
     "'txnAppId': applies to df.write"),
], ids=["delta-misspelt-key", "delta-no-such-column", "iceberg-misspelt-branch", "kafka-bad-semantic",
        "kafka-misspelt-ssl-key", "txn-on-a-stream"])
def test_check_refuses_bad_sink_options_naming_them(spark, tmp_path, capsys, format, options, message):
    text = PIPELINE.format(format=format, ck=tmp_path / "ck", options=options.replace("{tmp}", str(tmp_path)))
    pipeline = write(tmp_path, text)
    assert run_command.run(build_parser().parse_args(["run", str(pipeline), "--check"]), spark=spark) == 1
    out = capsys.readouterr().out
    assert "'sinks[0].options'" in out and message in out, out
    assert not (tmp_path / "ck").exists() and not (tmp_path / "delta").exists()  # a check writes nothing


def test_check_accepts_good_iceberg_options(spark, tmp_path, capsys):
    options = (f'table = "db.events", "catalog.type" = "sql", "catalog.uri" = "sqlite:///{tmp_path}/c.db", '
               f'"catalog.warehouse" = "file://{tmp_path}/wh", branch = "main"')
    pipeline = write(tmp_path, PIPELINE.format(format="sparklink.iceberg", ck=tmp_path / "ck", options=options))
    assert run_command.run(build_parser().parse_args(["run", str(pipeline), "--check"]), spark=spark) == 0, \
        capsys.readouterr().out
    assert not (tmp_path / "c.db").exists()  # nothing loaded or created


@pytest.mark.parametrize("committer", [False, True], ids=["source-or-at-least-once", "exactly-once"])
def test_a_misspelt_kafka_security_key_gets_a_did_you_mean(committer):
    with pytest.raises(ConfigError, match=r"kafka.sasl.usernme'?: is not a librdkafka setting \(did you mean "
                                          r"'kafka.sasl.username'\?\)"):
        ClientSecurity.from_client({"security.protocol": "sasl_ssl", "sasl.mechanism": "PLAIN", "sasl.usernme": "u",
                                    "sasl.password": "p"}, committer=committer)
