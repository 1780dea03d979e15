"""Options of the ``sparklink.cassandra`` sink, parsed once on the driver when a write starts.

:class:`CassandraSinkOptions` declares every option (the generated table in docs/cassandra.md
comes from it); :class:`CassandraSinkConfig` is the validated, picklable result that travels
to the executors with the sink.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass

from sparklink.cassandra.connection import CONSISTENCY_LEVELS, ConnectionSettings, TlsSettings
from sparklink.errors import ConfigError
from sparklink.options import BOOL, DURATION, Option, SparkOptions, choice, integer, string
from sparklink.sink.changelog import Changelog, ChangelogOptions
from sparklink.sink.txn import TxnOptions

SEMANTIC_UPSERT = "upsert"
SEMANTIC_WRITE_AHEAD = "write-ahead"
SEMANTICS = (SEMANTIC_UPSERT, SEMANTIC_WRITE_AHEAD)
COMMIT_TABLE = "sparklink_commits"
_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,47}$")


class CassandraSinkOptions(TxnOptions, ChangelogOptions):
    """``sparklink.cassandra`` as a sink."""

    ignored = ("path",)  # Spark may pass a path for save(path); keyspace and table name the target
    hosts = Option("hosts", string("comma-separated host names or addresses"), required=True,
                   doc="contact points of the cluster (the driver discovers the other nodes)")
    port = Option("port", integer(1), default=9042, doc="the native transport (CQL) port of every host")
    keyspace = Option("keyspace", string("a keyspace name"), required=True,
                      doc="the target's keyspace (CQL rules: unquoted names are lower case)")
    table = Option("table", string("a table name"), required=True,
                   doc="the target table; it must exist, with every DataFrame column and the whole primary key "
                       "among the DataFrame's columns")
    semantic = Option("semantic", choice(*SEMANTICS), default=SEMANTIC_UPSERT,
                      doc="`upsert`: tasks write by primary key (replays rewrite the same rows); `write-ahead`: tasks "
                          "stage the batch in the checkpoint, the commit writes it and records the batch in "
                          "`commitTable` (see [semantics](#semantics))")
    consistency_level = Option("consistencyLevel", choice(*CONSISTENCY_LEVELS), default="LOCAL_QUORUM",
                               doc="of every write and of the commit table's reads")
    max_concurrent_requests = Option("maxConcurrentRequests", integer(1), default=32,
                                     doc="requests in flight per task (and in the write-ahead commit)")
    max_retries = Option("maxRetries", integer(0), default=5,
                         doc="retries of a request that timed out or found the replicas unavailable/overloaded "
                             "(writes are idempotent: each row carries its write timestamp)")
    request_timeout = Option("requestTimeout", DURATION, default=30.0, default_doc="`30s`",
                             doc="client-side timeout of one request")
    batch_rows = Option("batchRows", integer(1), default=32,
                        doc="rows of one partition key sent in one unlogged batch at most (tables with clustering "
                            "columns; each row is its own request otherwise)")
    local_datacenter = Option("localDatacenter", string("a data center name"),
                              doc="the data center whose nodes coordinate the writes (driver's "
                                  "DCAwareRoundRobinPolicy); absent: the contact points' data center")
    username = Option("username", string("a role name"), doc="with `password`: PlainTextAuthProvider credentials")
    password = Option("password", string("a password"), secret=True,
                      doc="never appears in logs, error messages, commit logs or reprs")
    ssl = Option("ssl", BOOL, default=False, doc="TLS to every node (the driver's `ssl_context`)")
    ssl_ca_certificate = Option("sslCaCertificate", string("path of a PEM file"),
                                doc="CA certificates to verify the nodes with (absent: the system's)")
    ssl_certificate = Option("sslCertificate", string("path of a PEM file"),
                             doc="client certificate, for nodes that require one (with `sslKey`)")
    ssl_key = Option("sslKey", string("path of a PEM file"), doc="the client certificate's private key")
    ssl_key_password = Option("sslKeyPassword", string("a password"), secret=True,
                              doc="of an encrypted `sslKey`")
    ssl_check_hostname = Option("sslCheckHostname", BOOL, default=True,
                                doc="check that a node's certificate names the host connected to")
    commit_table = Option("commitTable", string("`name` or `keyspace.name`"), default=COMMIT_TABLE,
                          doc="the checkpoint-committer table of `write-ahead` (and of `txnAppId` records without "
                              "a checkpoint); created when missing, in the target's keyspace unless qualified")
    checkpoint_location = SparkOptions.checkpoint_location.documented(
        "required for `write-ahead` (the staged batches and the commit log live under "
        "`<checkpointLocation>/sparklink/`); for `df.write` give it as an option")


O = CassandraSinkOptions


@dataclass(frozen=True, kw_only=True)
class CassandraSinkConfig:
    """Validated sink settings; picklable (no live handles), shipped to executors."""

    connection: ConnectionSettings
    keyspace: str
    table: str
    semantic: str
    max_concurrent_requests: int
    max_retries: int
    batch_rows: int
    commit_keyspace: str
    commit_table: str
    checkpoint_location: str | None
    sink_id: str
    changelog: Changelog | None = None  # writeMode=upsert: deletes by key, sequenceColumn as write timestamp

    def __post_init__(self) -> None:
        if self.semantic == SEMANTIC_WRITE_AHEAD and not self.checkpoint_location:
            raise ConfigError(O.checkpoint_location.key, "is required for semantic=write-ahead (the staged batches "
                                                          "and the commit log live there)")

    @property
    def target(self) -> str:
        return f"{self.keyspace}.{self.table}"

    @classmethod
    def from_options(cls, options: Mapping[str, str] | None) -> "CassandraSinkConfig":
        opts = O.options(options)
        hosts = tuple(h.strip() for h in O.hosts.value(opts).split(",") if h.strip())
        if not hosts:
            raise ConfigError(O.hosts.key, "names no host", "comma-separated host names or addresses")
        username, password = O.username.get(opts), O.password.get(opts)
        if (username is None) != (password is None):
            given, missing = (O.username, O.password) if username is not None else (O.password, O.username)
            raise ConfigError(missing.key, f"is required with option '{given.key}'")
        tls = None
        if O.ssl.value(opts):
            tls = TlsSettings(ca_certificate=O.ssl_ca_certificate.get(opts), certificate=O.ssl_certificate.get(opts),
                              key=O.ssl_key.get(opts), key_password=O.ssl_key_password.get(opts),
                              check_hostname=O.ssl_check_hostname.value(opts))
        else:
            for spec in (O.ssl_ca_certificate, O.ssl_certificate, O.ssl_key, O.ssl_key_password):
                if spec.given(opts):
                    raise ConfigError(spec.key, "applies with ssl=true only", "ssl=true")
        connection = ConnectionSettings(hosts=hosts, port=O.port.value(opts), username=username, password=password,
                                        tls=tls, consistency_level=O.consistency_level.value(opts),
                                        local_datacenter=O.local_datacenter.get(opts),
                                        request_timeout=O.request_timeout.value(opts))
        keyspace = identifier(O.keyspace.key, O.keyspace.value(opts))
        table = identifier(O.table.key, O.table.value(opts))
        commit = O.commit_table.value(opts)
        commit_keyspace, _, commit_table = commit.rpartition(".")
        commit_keyspace = identifier(O.commit_table.key, commit_keyspace) if commit_keyspace else keyspace
        commit_table = identifier(O.commit_table.key, commit_table)
        checkpoint = O.checkpoint_location.get(opts)
        return cls(connection=connection, keyspace=keyspace, table=table, semantic=O.semantic.value(opts),
                   max_concurrent_requests=O.max_concurrent_requests.value(opts),
                   max_retries=O.max_retries.value(opts), batch_rows=O.batch_rows.value(opts),
                   commit_keyspace=commit_keyspace, commit_table=commit_table, checkpoint_location=checkpoint,
                   sink_id=_sink_id(checkpoint, f"{keyspace}.{table}"), changelog=Changelog.from_options(opts))


def identifier(option: str, value: str) -> str:
    """A keyspace or table name as CQL stores it: an unquoted name folds to lower case; a
    ``"Quoted"`` one keeps its case. Anything else is refused (the name goes into CQL text)."""
    text = value.strip()
    if len(text) > 2 and text.startswith('"') and text.endswith('"') and _NAME.match(text[1:-1]):
        return text[1:-1]
    if _NAME.match(text):
        return text.lower()
    raise ConfigError(option, f"'{value}' is not a keyspace or table name",
                      "letters, digits and '_', starting with a letter, at most 48; \"Quoted\" to keep upper case")


def _sink_id(checkpoint: str | None, target: str) -> str:
    """A stable id per (checkpoint, target): the partition of the commit table this sink owns."""
    return hashlib.sha256(f"{checkpoint or ''}\0{target}".encode()).hexdigest()[:16]
