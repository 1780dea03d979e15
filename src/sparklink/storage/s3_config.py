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
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sparklink.errors import ConfigError
from sparklink.options import Options, parse_bool

OPTION_S3_ENDPOINT = "s3.endpoint"
OPTION_S3_REGION = "s3.region"
OPTION_S3_ACCESS_KEY_ID = "s3.accessKeyId"
OPTION_S3_SECRET_ACCESS_KEY = "s3.secretAccessKey"
OPTION_S3_SESSION_TOKEN = "s3.sessionToken"
OPTION_S3_PROFILE = "s3.profile"
OPTION_S3_PATH_STYLE_ACCESS = "s3.pathStyleAccess"
OPTION_S3_ALLOW_UNCONDITIONAL_WRITES = "s3.allowUnconditionalWrites"
S3_OPTIONS = (OPTION_S3_ENDPOINT, OPTION_S3_REGION, OPTION_S3_ACCESS_KEY_ID, OPTION_S3_SECRET_ACCESS_KEY,
              OPTION_S3_SESSION_TOKEN, OPTION_S3_PROFILE, OPTION_S3_PATH_STYLE_ACCESS,
              OPTION_S3_ALLOW_UNCONDITIONAL_WRITES)
SECRET_OPTIONS = (OPTION_S3_SECRET_ACCESS_KEY, OPTION_S3_SESSION_TOKEN)
ENV_ENDPOINTS = ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")
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
            raise ConfigError(OPTION_S3_ACCESS_KEY_ID if self.access_key_id is None else OPTION_S3_SECRET_ACCESS_KEY,
                              f"'{OPTION_S3_ACCESS_KEY_ID}' and '{OPTION_S3_SECRET_ACCESS_KEY}' are set together "
                              "or not at all (then the AWS environment and config files give the credentials)")
        if self.session_token is not None and self.access_key_id is None:
            raise ConfigError(OPTION_S3_SESSION_TOKEN, f"needs '{OPTION_S3_ACCESS_KEY_ID}' and "
                              f"'{OPTION_S3_SECRET_ACCESS_KEY}'")
        if self.endpoint is not None and not self.endpoint.startswith(("http://", "https://")):
            raise ConfigError(OPTION_S3_ENDPOINT, f"'{self.endpoint}' is not an http:// or https:// URL",
                              "https://host[:port]")

    @classmethod
    def from_options(cls, options: Mapping[str, str] | Options | None) -> "S3Config":
        opts = options if isinstance(options, Options) else Options(options)
        return cls(endpoint=opts.get(OPTION_S3_ENDPOINT), region=opts.get(OPTION_S3_REGION),
                   access_key_id=opts.get(OPTION_S3_ACCESS_KEY_ID),
                   secret_access_key=opts.get(OPTION_S3_SECRET_ACCESS_KEY),
                   session_token=opts.get(OPTION_S3_SESSION_TOKEN), profile=opts.get(OPTION_S3_PROFILE),
                   path_style_access=parse_bool(OPTION_S3_PATH_STYLE_ACCESS,
                                                opts.get(OPTION_S3_PATH_STYLE_ACCESS, "false")),
                   allow_unconditional_writes=parse_bool(OPTION_S3_ALLOW_UNCONDITIONAL_WRITES,
                                                         opts.get(OPTION_S3_ALLOW_UNCONDITIONAL_WRITES, "false")))

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


def without_secrets(options: Mapping[str, str]) -> dict[str, str]:
    """``options`` with every secret value replaced by ``***`` (for what is recorded or shown)."""
    secret = {name.lower() for name in SECRET_OPTIONS}
    return {key: (REDACTED if key.lower() in secret else value) for key, value in options.items()}
