"""Kafka over TLS and SASL, on Apache Kafka's own listeners (TLS served by the broker; SASL PLAIN
and SCRAM-SHA-512 with real users, see sparklink.testing.kafka.start_kafka): the source, the
exactly-once sink and its committer authenticate as those users; what fails at start does so
with a one-line error naming the setting, within the start check's bounded timeout; and
secrets reach no file of the checkpoint, no log line and no error message.
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
from sparklink.testing.kafka import create_topic, make_certificates, make_client_certificate
from tests.kafka.jobs import sequence_to_kafka
from tests.kafka.readers import open_transaction_partitions, read_ids
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


def test_sasl_settings_as_the_committer_gets_them_and_unserved_mechanisms(kafka_tls):
    """No broker needed: the committer's settings (mechanism, user, password as kafka-python gets
    them) and the refusal of what the committer does not serve."""
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


@pytest.mark.parametrize(("listener", "mechanism"), [("sasl_plaintext", "PLAIN"), ("sasl_ssl", "SCRAM-SHA-512")],
                         ids=["plain", "scram-sha-512-over-tls"])
def test_sasl_users_write_exactly_once_and_read(spark, kafka, listener, mechanism, caplog):
    """A real user of the broker: an exactly-once ``df.write`` (writers, markers, committer's
    EndTxn, all authenticated) and ``spark.read`` through the SASL listener; what a
    read_committed consumer sees through it is every id once. The password is in no log record
    of this process (the start check's kafka-python client traces PLAIN's request at DEBUG)."""
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.WARNING, logger="py4j")
    endpoint = kafka.endpoint(listener, mechanism=mechanism)
    topic = f"sasl-{mechanism.lower()}-{uuid.uuid4().hex[:8]}"
    create_topic(endpoint.client, topic, 2)
    (spark.range(0, 200, 1, 2).selectExpr("cast(id as string) as value").write.format("sparklink.kafka")
     .options(**endpoint.options).option("topic", topic).option("semantic", "exactly-once").save())
    back = spark.read.format("sparklink.kafka").options(**endpoint.options).option("subscribe", topic).load()
    assert sorted(int(r.value) for r in back.select("value").collect()) == list(range(200))
    assert read_ids(endpoint.client, topic) == list(range(200))
    assert open_transaction_partitions(endpoint.client, topic) == []
    assert kafka.users[mechanism].password not in caplog.text


@pytest.mark.parametrize(("listener", "mechanism"), [("sasl_plaintext", "PLAIN"), ("sasl_ssl", "SCRAM-SHA-512")],
                         ids=["plain", "scram-sha-512-over-tls"])
def test_a_wrong_sasl_password_fails_at_start_in_one_line_without_showing_it(kafka, listener, mechanism, caplog):
    wrong = f"pw-{uuid.uuid4().hex}"
    endpoint = kafka.endpoint(listener, mechanism=mechanism).with_settings(**{"sasl.password": wrong})
    caplog.set_level(logging.DEBUG)
    for build in (_source(endpoint.options), _sink(endpoint.options)):
        message = _fails_at_start(build, "kafka.sasl.password")
        assert f"{mechanism} authentication of user '{kafka.users[mechanism].name}'" in message, message
        assert wrong not in message and kafka.users[mechanism].password not in message
    assert wrong not in caplog.text


def test_a_mechanism_the_listener_does_not_serve_fails_at_start(kafka):
    """Apache Kafka refuses the mechanism and closes the connection. Which of the two the client
    sees first is a race: the refusal (the one line names ``kafka.sasl.mechanism`` and the
    mechanism), or the closed connection, as after a wrong password (the one line names the
    password setting and says the mechanism may be the cause). Either way one line, at start,
    with no secret in it."""
    user = kafka.users["SCRAM-SHA-512"]
    endpoint = kafka.endpoint("sasl_plaintext", mechanism="SCRAM-SHA-512").with_settings(
        **{"sasl.mechanism": "SCRAM-SHA-256"})
    started = time.monotonic()
    with pytest.raises(ConfigError) as raised:
        _sink(endpoint.options)()
    assert time.monotonic() - started < BOUND
    message = str(raised.value)
    assert "\n" not in message and user.password not in message, message
    if message.startswith("option 'kafka.sasl.mechanism'"):  # the refusal was read
        assert "does not serve SCRAM-SHA-256 on this listener" in message, message
    else:  # the connection was closed first
        assert message.startswith("option 'kafka.sasl.password'"), message
        assert "SCRAM-SHA-256 authentication of user 'scram-user'" in message
        assert "a kafka.sasl.mechanism this listener does not serve" in message


def test_a_wrong_key_password_fails_at_start_without_showing_it(kafka_tls, tmp_path):
    cert, key = make_client_certificate(tmp_path / "client", "the-right-one")
    wrong = f"pw-{uuid.uuid4().hex}"
    options = dict(kafka_tls.options, **{"kafka.ssl.certificate.location": str(cert),
                                         "kafka.ssl.key.location": str(key), "kafka.ssl.key.password": wrong})
    message = _fails_at_start(_sink(options), "kafka.ssl.key.location")
    assert "wrong kafka.ssl.key.password?" in message and wrong not in message


def test_secrets_reach_no_checkpoint_file_and_no_log(kafka, tmp_path, spark, caplog, capfd):
    """An exactly-once query through the SASL_SSL listener as the SCRAM-SHA-512 user, with a client
    key under a password: every record once, no transaction left open, and neither password in
    any file under the checkpoint, any log record of this process or anything this process wrote
    to its stdout / stderr during the query. Not py4j's DEBUG trace of the gateway protocol: it
    shows every option handed to a DataStreamWriter, of any connector (left at WARNING here)."""
    endpoint = kafka.endpoint("sasl_ssl", mechanism="SCRAM-SHA-512")
    password = f"pw-{uuid.uuid4().hex}"
    sasl_password = endpoint.security["sasl.password"]
    cert, key = make_client_certificate(tmp_path / "client", password)
    options = {k: v for k, v in endpoint.options.items() if k != "kafka.bootstrap.servers"}
    options.update({"kafka.ssl.certificate.location": str(cert), "kafka.ssl.key.location": str(key),
                    "kafka.ssl.key.password": password})
    topic, checkpoint = f"secrets-{uuid.uuid4().hex[:8]}", tmp_path / "ck"
    create_topic(endpoint.client, topic, 2)
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.WARNING, logger="py4j")
    sequence_to_kafka(spark, bootstrap=endpoint.bootstrap_servers, topic=topic, checkpoint=str(checkpoint),
                      partitions=2, rows_per_split=20, max_rows_per_trigger=30, options=options)
    assert read_ids(endpoint.client, topic) == list(range(60))
    assert open_transaction_partitions(endpoint.client, topic) == []
    files = [p for p in checkpoint.rglob("*") if p.is_file()]
    out, err = capfd.readouterr()
    for secret in (password, sasl_password):
        assert files and not [p for p in files if secret.encode() in p.read_bytes()]
        assert secret not in out and secret not in err and secret not in caplog.text


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
