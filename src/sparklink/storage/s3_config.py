"""How to reach an S3 store: endpoint, region, credentials, addressing (driver and executors).

Every value may come from the connector's options; whatever an option does not set comes from
the standard AWS chain that boto3 reads itself: the environment (``AWS_ENDPOINT_URL_S3``,
``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``,
``AWS_REGION``, ``AWS_PROFILE``), the shared config and credentials files (``~/.aws/config``,
``~/.aws/credentials``) and instance roles. Nothing is taken from the code.

Secrets (the secret key and the session token) are kept out of ``repr``, out of every message
(:meth:`S3Config.describe` names where credentials come from, never their values) and out of
what the sink records on disk (:func:`without_secrets`).

The config is a small frozen value: it travels pickled to the executors, which build their own
client from it (a client is never pickled).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sparklink.errors import ConfigError
from sparklink.options import BOOL, Applies, Option, Options, OptionTable, string

if TYPE_CHECKING:
    from sparklink.storage.location import Location

# Where the s3.* options apply: the connector checks ``check_applies(options, "storage", "local", shown=path)``.
ON_S3 = Applies("storage", ("s3",), "applies to s3:// and s3a:// paths, not to the local path '{actual}'",
                "`s3://`, `s3a://` paths")


class S3Options(OptionTable):
    """How a connector reaches an S3 store (every file connector's table includes them)."""

    group = ("S3 paths only (refused on a local path): how to reach the store, see "
             "[object stores](object-stores.md#paths-and-settings)")
    group_default = "the AWS chain"

    endpoint = Option("s3.endpoint", string("`http(s)://host:port`"), applies=ON_S3,
                      default_doc="`AWS_ENDPOINT_URL_S3`, else `AWS_ENDPOINT_URL`, else AWS",
                      doc="an S3-compatible store")
    region = Option("s3.region", string("a region"), applies=ON_S3, default_doc="`AWS_REGION` / the config file",
                    doc="the signing region")
    access_key_id = Option("s3.accessKeyId", string("an access key id"), applies=ON_S3,
                           default_doc="`AWS_ACCESS_KEY_ID`, `~/.aws/credentials`, instance role",
                           doc="set together with `s3.secretAccessKey` or not at all")
    secret_access_key = Option("s3.secretAccessKey", string("a secret key"), applies=ON_S3, secret=True,
                               default_doc="`AWS_SECRET_ACCESS_KEY`, `~/.aws/credentials`, instance role",
                               doc="set together with `s3.accessKeyId`; never shown in messages or records")
    session_token = Option("s3.sessionToken", string("a session token"), applies=ON_S3, secret=True,
                           default_doc="`AWS_SESSION_TOKEN`", doc="temporary credentials (with the two above)")
    profile = Option("s3.profile", string("a profile name"), applies=ON_S3, default_doc="`AWS_PROFILE`",
                     doc="a profile of `~/.aws/config` / `~/.aws/credentials`")
    path_style_access = Option("s3.pathStyleAccess", BOOL, default=False, applies=ON_S3,
                               doc="`http://host/bucket/key` instead of `http://bucket.host/key` (most S3-compatible "
                                   "stores)")
    allow_unconditional_writes = Option("s3.allowUnconditionalWrites", BOOL, default=False, applies=ON_S3,
                                        doc="accept a store that ignores conditional writes (unsafe: see "
                                            "[conditional writes](object-stores.md#conditional-writes-and-stores-that-ignore-them))")


S3_OPTIONS = S3Options.keys()
SECRET_OPTIONS = tuple(spec.key for spec in S3Options.specs() if spec.secret)
O = S3Options
ENV_ENDPOINTS = ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")
DEFAULT_PART_SIZE = 8 * 1024 * 1024  # s3.partSize: the part of a multipart upload (files of the sinks)
REDACTED = "***"


@dataclass(frozen=True, kw_only=True)
class S3Config:
    """Connection settings; None means "as the AWS chain says"."""

    endpoint: str | None = None
    region: str | None = None
    access_key_id: str | None = None
    secret_access_key: str | None = field(default=None, repr=False)
    session_token: str | None = field(default=None, repr=False)
    profile: str | None = None
    path_style_access: bool = False
    allow_unconditional_writes: bool = False

    def __post_init__(self) -> None:
        if (self.access_key_id is None) != (self.secret_access_key is None):
            raise ConfigError(O.access_key_id.key if self.access_key_id is None else O.secret_access_key.key,
                              f"'{O.access_key_id}' and '{O.secret_access_key}' are set together "
                              "or not at all (then the AWS environment and config files give the credentials)")
        if self.session_token is not None and self.access_key_id is None:
            raise ConfigError(O.session_token.key, f"needs '{O.access_key_id}' and '{O.secret_access_key}'")
        if self.endpoint is not None and not self.endpoint.startswith(("http://", "https://")):
            raise ConfigError(O.endpoint.key, f"'{self.endpoint}' is not an http:// or https:// URL",
                              "https://host[:port]")

    @classmethod
    def from_options(cls, options: Mapping[str, str] | Options | None) -> "S3Config":
        opts = options if isinstance(options, Options) else Options(options)
        return cls(endpoint=O.endpoint.get(opts), region=O.region.get(opts), access_key_id=O.access_key_id.get(opts),
                   secret_access_key=O.secret_access_key.get(opts), session_token=O.session_token.get(opts),
                   profile=O.profile.get(opts), path_style_access=O.path_style_access.value(opts),
                   allow_unconditional_writes=O.allow_unconditional_writes.value(opts))

    def effective_endpoint(self) -> str | None:
        """The endpoint requests go to: the option, else the environment, else None (AWS)."""
        if self.endpoint is not None:
            return self.endpoint
        return next((os.environ[name] for name in ENV_ENDPOINTS if os.environ.get(name)), None)

    def describe(self) -> str:
        """Where requests go and where credentials come from, for messages: no secret."""
        endpoint = self.effective_endpoint() or "AWS S3"
        credentials = (f"access key id {self.access_key_id} from options" if self.access_key_id
                       else f"profile '{self.profile}'" if self.profile else "the AWS environment / config files")
        style = ", path-style" if self.path_style_access else ""
        return f"endpoint {endpoint}{style} (credentials: {credentials})"

    def client(self) -> Any:
        """A new boto3 S3 client (one per process that uses it; never pickled)."""
        try:
            import boto3
            from botocore.config import Config
        except ImportError:
            raise ConfigError("path", "s3:// and s3a:// paths need boto3, which is not installed",
                              "pip install 'sparklink[s3]'") from None

        session = boto3.session.Session(profile_name=self.profile) if self.profile else boto3.session.Session()
        config = Config(s3={"addressing_style": "path" if self.path_style_access else "auto"},
                        retries={"mode": "standard", "max_attempts": 5},
                        request_checksum_calculation="when_required", response_checksum_validation="when_required")
        return session.client("s3", endpoint_url=self.endpoint, region_name=self.region,
                              aws_access_key_id=self.access_key_id, aws_secret_access_key=self.secret_access_key,
                              aws_session_token=self.session_token, config=config)


    def shared_client(self) -> Any:
        """This process's boto3 client for these settings: built once (about 0.2 s) and shared by
        every thread, task and micro-batch of the process (boto3 clients are thread-safe)."""
        return _shared("boto3", self, self.client)

    def shared_arrow_filesystem(self) -> Any:
        """This process's pyarrow ``S3FileSystem`` for these settings: built once (it costs more
        than reading a small object) and shared by the sink's storage and the source's readers."""
        return _shared("pyarrow", self, self.arrow_filesystem)

    def arrow_filesystem(self) -> Any:
        """A pyarrow ``S3FileSystem`` with the same settings (random-access reads by ranged GETs:
        the source's splits, compaction inputs). Unset values come from the AWS chain, as for
        boto3."""
        from urllib.parse import urlparse

        from pyarrow.fs import S3FileSystem

        kwargs: dict[str, Any] = {"region": self.region, "force_virtual_addressing": False}
        endpoint = self.effective_endpoint()
        if endpoint is not None:
            parsed = urlparse(endpoint)
            kwargs.update(endpoint_override=parsed.netloc, scheme=parsed.scheme)
        if self.access_key_id is not None:
            kwargs.update(access_key=self.access_key_id, secret_key=self.secret_access_key,
                          session_token=self.session_token)
        return S3FileSystem(**{k: v for k, v in kwargs.items() if v is not None})


#: Environment variables that make delta-rs (1.6.6) write a commit to S3 by copy and delete
#: instead of a conditional write (``If-None-Match: *``): two writers could both "win" one version.
UNSAFE_ENVIRONMENT = ("AWS_S3_LOCKING_PROVIDER", "AWS_S3_ALLOW_UNSAFE_RENAME")
DEFAULT_REGION = "us-east-1"


def object_store_options(config: S3Config, where: str) -> dict[str, str]:
    """The settings of the Rust ``object_store`` crate (delta-rs's ``storage_options``) for the
    store at ``where`` with ``config``: endpoint, region and frozen credentials, each as boto3's
    chain finds it when the option is unset (the executors' clients use the same chain). Commits
    are conditional writes: ``AWS_S3_ALLOW_UNSAFE_RENAME=false``, and an environment that sets
    one of :data:`UNSAFE_ENVIRONMENT` is refused. Built for each use (short-lived credentials
    stay fresh); holds secrets: never log or show it. Driver side."""
    unsafe = {name: os.environ[name] for name in UNSAFE_ENVIRONMENT if os.environ.get(name)}
    if unsafe:
        name = min(unsafe)
        raise ConfigError("path", f"the environment sets {name}={unsafe[name]!r}, which makes delta-rs 1.6.6 "
                          "commit to S3 by copy and delete instead of a conditional write (two writers may "
                          f"both commit one table version); unset {', '.join(sorted(unsafe))} for {where}",
                          "S3 conditional writes (If-None-Match), the default of delta-rs")
    options = {"AWS_S3_ALLOW_UNSAFE_RENAME": "false", "AWS_EC2_METADATA_DISABLED": "true"}
    endpoint = config.effective_endpoint()
    options["AWS_REGION"] = config.region or _session(config).region_name or DEFAULT_REGION
    if endpoint is not None:
        options["AWS_ENDPOINT_URL"] = endpoint
        # plain http only where the endpoint itself says http (a loopback test server)
        options["AWS_ALLOW_HTTP"] = "true" if endpoint.startswith("http://") else "false"
    if config.access_key_id is not None:
        access_key, secret_key, token = config.access_key_id, config.secret_access_key, config.session_token
    else:
        found = _session(config).get_credentials()
        if found is None:
            raise ConfigError(O.endpoint.key, f"no S3 credentials for {where} at {config.describe()}: "
                              "set s3.accessKeyId / s3.secretAccessKey, s3.profile, or the AWS environment")
        frozen = found.get_frozen_credentials()
        access_key, secret_key, token = frozen.access_key, frozen.secret_key, frozen.token
    options["AWS_ACCESS_KEY_ID"] = access_key
    if secret_key is not None:
        options["AWS_SECRET_ACCESS_KEY"] = secret_key
    if token:
        options["AWS_SESSION_TOKEN"] = token
    return options


def _session(config: S3Config) -> Any:
    """boto3's session for ``config``'s profile (the AWS chain's region and credentials)."""
    try:
        import boto3
    except ImportError:
        raise ConfigError("path", "s3:// and s3a:// paths need boto3 (the AWS chain's credentials and region), "
                          "which is not installed", "pip install 'sparklink[s3]'") from None

    return boto3.session.Session(profile_name=config.profile) if config.profile else boto3.session.Session()


def to_options(config: S3Config | None) -> dict[str, str] | None:
    """``config`` back as ``s3.*`` options (for :func:`sparklink.storage.open_storage`); None for None."""
    if config is None:
        return None
    pairs = {O.endpoint.key: config.endpoint, O.region.key: config.region,
             O.access_key_id.key: config.access_key_id, O.secret_access_key.key: config.secret_access_key,
             O.session_token.key: config.session_token, O.profile.key: config.profile,
             O.path_style_access.key: "true" if config.path_style_access else None,
             O.allow_unconditional_writes.key: "true" if config.allow_unconditional_writes else None}
    return {k: v for k, v in pairs.items() if v is not None}


def without_secrets(options: Mapping[str, str]) -> dict[str, str]:
    """``options`` with every secret value replaced by ``***`` (for what is recorded or shown)."""
    secret = {name.lower() for name in SECRET_OPTIONS}
    return {key: (REDACTED if key.lower() in secret else value) for key, value in options.items()}


_SHARED: dict[tuple[str, S3Config], Any] = {}  # (kind, settings) -> this process's client of that kind
_SHARED_LOCK = threading.Lock()


def _shared(kind: str, config: S3Config, build: Callable[[], Any]) -> Any:
    with _SHARED_LOCK:
        found = _SHARED.get((kind, config))
        if found is None:
            found = _SHARED[(kind, config)] = build()
    return found


def settings_for(location: "Location", opts: Options, table: type[OptionTable], *,
                 shown: str | None = None) -> S3Config | None:
    """The S3 settings of a reader of ``location`` from its option ``table`` (None for a store
    without such settings, where the table's ``s3.*`` options are refused naming the path, or
    ``shown``)."""
    from sparklink.storage.location import S3Location

    if isinstance(location, S3Location):
        return S3Config.from_options(opts)
    table.check_applies(opts, ON_S3.selector, "local", shown=shown if shown is not None else location.uri())
    return None
