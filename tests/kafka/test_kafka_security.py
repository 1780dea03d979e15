"""Kafka over TLS (Tansu behind the test's TLS-terminating proxy): what fails at start, with a
one-line error naming the setting and within the start check's bounded timeout; and that secrets
reach no file of the checkpoint, no log line and no error message.

SASL: no broker here serves it (Tansu 0.6.0 refuses the SASL handshake on a listener without
``--authentication``, and with it no user can be made to authenticate; docs/kafka.md).
What is tested of it: the committer's settings (mechanism, user, password as kafka-python gets
them), the refusal of mechanisms the committer does not serve, and a SCRAM client against the
real TLS listener failing at start naming kafka.sasl.mechanism, without its password anywhere.
"""

from __future__ import annotations

import logging
import time
import uuid

import pytest

from sparklink.errors import ConfigError
from sparklink.kafka.config import KafkaSourceConfig
from sparklink.kafka.enumerator import KafkaSplitEnumerator
from sparklink.kafka.security import START_CHECK_TIMEOUT_SECONDS, ClientSecurity, check_connection, replicable
from sparklink.kafka.sink import KafkaSink
from sparklink.testing.kafka import make_certificates, make_client_certificate
from tests.kafka.jobs import sequence_to_kafka
from tests.kafka.readers import committed_transaction_ids, open_transaction_partitions
from tests.kafka.test_kafka_sink import SCHEMA

BOUND = START_CHECK_TIMEOUT_SECONDS + 5  # the start check's timeout and some slack for a loaded machine


def _fails_at_start(build, setting: str) -> str:
    started = time.monotonic()
    with pytest.raises(ConfigError) as raised:
        build()
    assert time.monotonic() - started < BOUND
    message = str(raised.value)
    assert f"option '{setting}'" in message and "\n" not in message, message
    return message


def _source(options: dict):
    return lambda: KafkaSplitEnumerator(KafkaSourceConfig.from_options(dict(options, subscribe="t")), streaming=True)


def _sink(options: dict):
    return lambda: KafkaSink(dict(options, topic="t"), SCHEMA)


def test_a_wrong_ca_fails_the_source_and_the_sink_at_start(kafka_tls, tmp_path):
    other = make_certificates(tmp_path / "other-ca", server=False)
    options = dict(kafka_tls.options, **{"kafka.ssl.ca.location": str(other.ca)})
    for build in (_source(options), _sink(options)):
        message = _fails_at_start(build, "kafka.ssl.ca.location")
        assert "is not signed by a CA of" in message


def test_a_plaintext_client_against_the_tls_listener_fails_at_start(kafka_tls):
    message = _fails_at_start(_source({"kafka.bootstrap.servers": kafka_tls.bootstrap_servers}),
                              "kafka.security.protocol")
    assert "a TLS listener?" in message


def test_a_tls_client_against_a_plaintext_listener_fails_at_start(kafka, kafka_tls):
    options = dict(kafka_tls.options, **{"kafka.bootstrap.servers": kafka.bootstrap_servers})
    _fails_at_start(_sink(options), "kafka.security.protocol")


def test_sasl_settings_reach_the_committer_and_the_password_no_message(kafka_tls, caplog):
    password = f"pw-{uuid.uuid4().hex}"
    sasl = {"kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "SCRAM-SHA-512",
            "kafka.sasl.username": "alice", "kafka.sasl.password": password}
    client = {k[len("kafka."):]: v for k, v in dict(kafka_tls.options, **sasl).items()}
    security = ClientSecurity.from_client(client, committer=True)
    settings = security.kafka_python()
    assert (settings["security_protocol"], settings["sasl_mechanism"], settings["sasl_plain_username"],
            settings["sasl_plain_password"]) == ("SASL_SSL", "SCRAM-SHA-512", "alice", password)
    assert settings["ssl_context"].check_hostname and password not in repr(security)
    with pytest.raises(ConfigError, match="'GSSAPI' is not served by the exactly-once committer"):
        KafkaSink(dict(kafka_tls.options, topic="t", **dict(sasl, **{"kafka.sasl.mechanism": "GSSAPI"})), SCHEMA)
    with pytest.raises(ConfigError, match="kafka.ssl.keystore.location.*not served by the exactly-once committer"):
        KafkaSink(dict(kafka_tls.options, topic="t", **{"kafka.ssl.keystore.location": "/x.p12"}), SCHEMA)
    # the source and at-least-once pass GSSAPI and keystores to librdkafka; the start check leaves them to it
    assert not replicable(dict(client, **{"sasl.mechanism": "GSSAPI"}))
    assert not replicable(dict(client, **{"ssl.keystore.location": "/x.p12"}))
    caplog.set_level(logging.DEBUG)
    message = _fails_at_start(_sink(dict(kafka_tls.options, **sasl)), "kafka.sasl.mechanism")
    assert "does not serve SCRAM-SHA-512" in message
    assert password not in message and password not in caplog.text


def test_a_wrong_key_password_fails_at_start_without_showing_it(kafka_tls, tmp_path):
    cert, key = make_client_certificate(tmp_path / "client", "the-right-one")
    wrong = f"pw-{uuid.uuid4().hex}"
    options = dict(kafka_tls.options, **{"kafka.ssl.certificate.location": str(cert),
                                         "kafka.ssl.key.location": str(key), "kafka.ssl.key.password": wrong})
    message = _fails_at_start(_sink(options), "kafka.ssl.key.location")
    assert "wrong kafka.ssl.key.password?" in message and wrong not in message


def test_secrets_reach_no_checkpoint_file_and_no_log(kafka_tls, new_tls_topic, tmp_path, spark, caplog, capfd):
    """An exactly-once query over TLS with a client key under a password: every record once, no
    transaction left open, and the password in no file under the checkpoint, no log record of
    this process and nothing this process wrote to its stdout / stderr during the query. Not
    py4j's DEBUG trace of the gateway protocol: it shows every option handed to a
    DataStreamWriter, of any connector (left at WARNING here)."""
    password = f"pw-{uuid.uuid4().hex}"
    cert, key = make_client_certificate(tmp_path / "client", password)
    options = {k: v for k, v in kafka_tls.options.items() if k != "kafka.bootstrap.servers"}
    options.update({"kafka.ssl.certificate.location": str(cert), "kafka.ssl.key.location": str(key),
                    "kafka.ssl.key.password": password})
    topic, checkpoint = new_tls_topic(2), tmp_path / "ck"
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.WARNING, logger="py4j")
    sequence_to_kafka(spark, bootstrap=kafka_tls.bootstrap_servers, topic=topic, checkpoint=str(checkpoint),
                      partitions=2, rows_per_split=20, max_rows_per_trigger=30, options=options)
    assert committed_transaction_ids(kafka_tls.client, topic, checkpoint) == list(range(60))
    assert open_transaction_partitions(kafka_tls.client, topic) == []
    files = [p for p in checkpoint.rglob("*") if p.is_file()]
    assert files and not [p for p in files if password.encode() in p.read_bytes()]
    out, err = capfd.readouterr()
    assert password not in out and password not in err and password not in caplog.text


def test_librdkafka_settings_as_the_committer_applies_them(tmp_path):
    """No broker: each served setting's meaning in the committer's SSL context / kafka-python settings."""
    import ssl

    files = make_certificates(tmp_path / "ca", server=False)
    base = {"bootstrap.servers": "127.0.0.1:1", "security.protocol": "SSL", "ssl.ca.location": str(files.ca)}
    context = ClientSecurity.from_client(base, committer=True).ssl_context()
    assert context.check_hostname and context.verify_mode == ssl.CERT_REQUIRED
    assert len(context.get_ca_certs()) == 1  # only the given CA, as librdkafka (not the system's store too)
    relaxed = dict(base, **{"ssl.endpoint.identification.algorithm": "none"})
    assert not ClientSecurity.from_client(relaxed, committer=True).ssl_context().check_hostname
    unverified = dict(base, **{"enable.ssl.certificate.verification": "false"})
    assert ClientSecurity.from_client(unverified, committer=True).ssl_context().verify_mode == ssl.CERT_NONE
    directory = dict(base, **{"ssl.ca.location": str(files.ca.parent)})  # a directory of CAs, as librdkafka
    assert ClientSecurity.from_client(directory, committer=True).ssl_context() is not None
    alias = {"bootstrap.servers": "h:1", "security.protocol": "sasl_plaintext", "sasl.mechanisms": "plain",
             "sasl.username": "u", "sasl.password": "p"}
    settings = ClientSecurity.from_client(alias, committer=True).kafka_python()
    assert settings == {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN",
                        "sasl_plain_username": "u", "sasl_plain_password": "p"}
    assert ClientSecurity.from_client({"bootstrap.servers": "h:1"}, committer=True).kafka_python() == {
        "security_protocol": "PLAINTEXT"}
    check_connection(dict(base, **{"bootstrap.servers": "127.0.0.1:1"}))  # refused TCP: left to the clients' retries
    with pytest.raises(ConfigError, match="'kafka.sasl.username'.*no SASL"):
        ClientSecurity.from_client({"sasl.username": "u"}, committer=True)
    with pytest.raises(ConfigError, match="'kafka.enable.ssl.certificate.verification': 'maybe' is not a boolean"):
        ClientSecurity.from_client(dict(base, **{"enable.ssl.certificate.verification": "maybe"}), committer=True)
