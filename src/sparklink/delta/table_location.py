"""Where a Delta table lives: a local directory or an S3 prefix (driver and executors).

The ``path`` option is parsed by :func:`sparklink.storage.parse_location` (the parser every
file connector uses), and S3 settings are the file connectors' ``s3.*`` options
(:class:`sparklink.storage.S3Config`: endpoint, region, credentials, each falling back to the
AWS chain). One :class:`TableLocation` serves three users:

* executors write data files through it (:meth:`open_data_file`): a local file, or one S3
  multipart upload through the storage seam (:class:`sparklink.storage.multipart_file.MultipartFile`),
  completed when the file is closed (an object nobody references until the driver's commit);
* the driver removes a failed attempt's files and lists a directory's files through the same
  seam (:meth:`storage`);
* delta-rs, on the driver, gets the table's URI and its ``storage_options``
  (:meth:`delta_storage_options`), derived from the same settings.

Commits on S3 are safe against concurrent writers only through S3 conditional writes: delta-rs
1.6.6 writes a commit file ``_delta_log/<version>.json`` with ``PutMode::Create``
(``If-None-Match: *``) unless ``AWS_S3_ALLOW_UNSAFE_RENAME`` or ``AWS_S3_LOCKING_PROVIDER`` is
set, in which case it copies a temporary file to the commit's name and deletes it (not atomic:
two writers may both "win" one version; its DynamoDB locking is gone in 1.x). So this module
passes ``AWS_S3_ALLOW_UNSAFE_RENAME=false`` and refuses an environment that sets either
variable, and the sink probes the store's conditional writes once per run
(:meth:`check_conditional_writes`), as the file sink does.

The value is frozen and pickled to executors; the live clients are built in each process and
cached there (never pickled).
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple

from sparklink.errors import ConfigError
from sparklink.options import Option, Options, string
from sparklink.storage import (
    FileStorage,
    LocalLocation,
    MemoryLocation,
    S3Config,
    S3Location,
    open_storage,
    parse_location,
)
from sparklink.storage.s3_config import ON_S3, S3Options


class DeltaTableOptions(S3Options):
    """Where a Delta table lives: the options the sink and the source share."""

    path = Option("path", string("a directory, or `s3://bucket/prefix` / `s3a://...`"), required=True,
                  doc="the table (`.save(path)` / `.load(path)` set it)")


PATH = DeltaTableOptions.path.key
# delta-rs reads these from the environment; either one makes its S3 commits non-atomic
UNSAFE_ENVIRONMENT = ("AWS_S3_LOCKING_PROVIDER", "AWS_S3_ALLOW_UNSAFE_RENAME")
DEFAULT_REGION = "us-east-1"

_STORAGES: dict[TableLocation, FileStorage] = {}


@dataclass(frozen=True, kw_only=True)
class TableLocation:
    """``location`` (local or S3) and, on S3, the connection settings."""

    location: LocalLocation | S3Location
    s3: S3Config | None = None

    @classmethod
    def from_options(cls, options: Options) -> TableLocation:
        """Driver side, at query start: ``path`` and the ``s3.*`` options (refused on a local path)."""
        location = parse_location(PATH, DeltaTableOptions.path.value(options))
        if isinstance(location, S3Location):
            if not location.prefix:
                raise ConfigError(PATH, f"'{location.uri()}' names a bucket's root; a Delta table needs a "
                                  "prefix of its own", "s3://bucket/table")
            return cls(location=location, s3=S3Config.from_options(options))
        if isinstance(location, MemoryLocation):
            raise ConfigError(PATH, f"'{location.uri()}': a Delta table lives in a local directory or under an "
                              "S3 prefix, not in a memory store (delta-rs and the executors cannot open it)",
                              "/path/to/table or s3://bucket/table")
        S3Options.check_applies(options, ON_S3.selector, "local", shown=location.path)
        return cls(location=LocalLocation(path=str(Path(location.path).absolute())))

    @property
    def on_s3(self) -> bool:
        return isinstance(self.location, S3Location)

    @property
    def local_root(self) -> Path:
        """The table's directory (local tables only)."""
        if not isinstance(self.location, LocalLocation):
            raise TypeError(f"{self.uri()} is not a local table")
        return Path(self.location.path)

    def uri(self) -> str:
        """What delta-rs opens: the local path, or ``s3://bucket/prefix`` (``s3a`` kept as given)."""
        return self.location.uri()

    def describe(self) -> str:
        return self.storage().describe() if self.on_s3 else self.uri()

    # ---------------------------------------------------------------- storage seam
    def storage(self) -> FileStorage:
        """This process's storage of the table (built once per process, never pickled)."""
        storage = _STORAGES.get(self)
        if storage is None:
            storage = _STORAGES[self] = open_storage(self.location, _s3_option_map(self.s3))
        return storage

    def check_conditional_writes(self) -> None:
        """Driver: refuse an S3 store that ignores ``If-None-Match`` (delta-rs's commits would
        then overwrite each other), unless ``s3.allowUnconditionalWrites``."""
        if self.on_s3:
            self.storage().check_conditional_writes()

    def open_data_file(self, relative: str) -> DataFile:
        """Executor: a new data file at ``relative`` (``/``-separated, under the table)."""
        if self.on_s3:
            from sparklink.storage.multipart_file import MultipartFile
            from sparklink.storage.s3 import S3Storage

            storage = self.storage()
            assert isinstance(storage, S3Storage)  # on_s3: open_storage built it for an S3Location
            return DataFile(relative=relative, output=MultipartFile.create(storage, relative), storage=storage)
        path = self.local_root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        return DataFile(relative=relative, path=path)

    def delete(self, relative: str) -> None:
        if self.on_s3:
            self.storage().delete(relative)
        else:
            (self.local_root / relative).unlink(missing_ok=True)

    def names_in(self, directory: str, prefix: str) -> list[str]:
        """Relative paths of the files directly in ``directory`` (``""``: the root) whose name
        starts with ``prefix`` (on S3 one ListObjectsV2 of exactly that key prefix: the cost
        follows the matching files, not the directory's)."""
        if self.on_s3:
            start = f"{directory}/{prefix}" if directory else prefix
            return [info.key for info in self.storage().list(start) if "/" not in info.key[len(start):]]
        else:
            folder = self.local_root / directory
            names = [p.name for p in folder.glob(prefix + "*")] if folder.is_dir() else []
        return [f"{directory}/{n}" if directory else n for n in names if n.startswith(prefix)]

    def read_bytes(self, relative: str) -> bytes | None:
        """The whole content of ``relative`` (a commit file), None if it does not exist."""
        if self.on_s3:
            stored = self.storage().read(relative)
            return None if stored is None else stored.data
        try:
            return (self.local_root / relative).read_bytes()
        except FileNotFoundError:
            return None

    def modified_at(self, relative: str) -> float | None:
        """Modification time (epoch seconds; S3: ``LastModified``) of ``relative``, None if absent."""
        if self.on_s3:
            info = self.storage().info(relative)
            return None if info is None else info.modified_at
        try:
            return (self.local_root / relative).stat().st_mtime
        except FileNotFoundError:
            return None

    def open_input(self, relative: str) -> Any:
        """``relative`` for pyarrow's readers (executor): a local path, or a random-access S3 file."""
        if self.on_s3:
            return self.storage().open_input(relative)
        return str(self.local_root / relative)

    # ---------------------------------------------------------------- delta-rs
    def delta_storage_options(self) -> dict[str, str] | None:
        """delta-rs's ``storage_options`` (driver; built for each use, so short-lived
        credentials of the AWS chain are fresh). None for a local table. Holds secrets: never
        log or show it."""
        if not self.on_s3:
            return None
        unsafe = {name: os.environ[name] for name in UNSAFE_ENVIRONMENT if os.environ.get(name)}
        if unsafe:
            name = min(unsafe)
            raise ConfigError(PATH, f"the environment sets {name}={unsafe[name]!r}, which makes delta-rs 1.6.6 "
                              "commit to S3 by copy and delete instead of a conditional write (two writers may "
                              f"both commit one table version); unset {', '.join(sorted(unsafe))} for "
                              f"{self.uri()}", "S3 conditional writes (If-None-Match), the default of delta-rs")
        config = self.s3 or S3Config()
        options = {"AWS_S3_ALLOW_UNSAFE_RENAME": "false", "AWS_EC2_METADATA_DISABLED": "true"}
        endpoint = config.effective_endpoint()
        region = config.region or _chain_region(config) or DEFAULT_REGION
        options["AWS_REGION"] = region
        if endpoint is not None:
            options["AWS_ENDPOINT_URL"] = endpoint
            # plain http only where the endpoint itself says http (a loopback test server)
            options["AWS_ALLOW_HTTP"] = "true" if endpoint.startswith("http://") else "false"
        credentials = _chain_credentials(config)
        if credentials is None:
            raise ConfigError(S3Options.endpoint.key, f"no S3 credentials for {self.uri()} at {config.describe()}: "
                              "set s3.accessKeyId / s3.secretAccessKey, s3.profile, or the AWS environment")
        options["AWS_ACCESS_KEY_ID"] = credentials.access_key
        options["AWS_SECRET_ACCESS_KEY"] = credentials.secret_key
        if credentials.token:
            options["AWS_SESSION_TOKEN"] = credentials.token
        return options


def _s3_option_map(config: S3Config | None) -> dict[str, str] | None:
    """``config`` back as ``s3.*`` options, for :func:`sparklink.storage.open_storage`."""
    if config is None:
        return None
    o = S3Options
    pairs = {o.endpoint.key: config.endpoint, o.region.key: config.region,
             o.access_key_id.key: config.access_key_id, o.secret_access_key.key: config.secret_access_key,
             o.session_token.key: config.session_token, o.profile.key: config.profile,
             o.path_style_access.key: "true" if config.path_style_access else None,
             o.allow_unconditional_writes.key: "true" if config.allow_unconditional_writes else None}
    return {k: v for k, v in pairs.items() if v is not None}


def _session(config: S3Config) -> Any:
    try:
        import boto3
    except ImportError:
        raise ConfigError(PATH, "s3:// and s3a:// paths need boto3 (the AWS chain's credentials and region), "
                          "which is not installed", "pip install 'sparklink[s3]'") from None

    return boto3.session.Session(profile_name=config.profile) if config.profile else boto3.session.Session()


def _chain_region(config: S3Config) -> str | None:
    return _session(config).region_name


class _Credentials(NamedTuple):
    access_key: str
    secret_key: str | None
    token: str | None

    def __repr__(self) -> str:  # never the secret
        return f"_Credentials(access_key={self.access_key!r})"


def _chain_credentials(config: S3Config) -> Any:
    """Frozen credentials: the options', else what boto3's chain finds (environment, config
    files, profile, instance role): the same chain the executors' boto3 clients use."""
    if config.access_key_id is not None:
        return _Credentials(config.access_key_id, config.secret_access_key, config.session_token)
    found = _session(config).get_credentials()
    return None if found is None else found.get_frozen_credentials()


class DataFile:
    """One data file being written (executor): ``output`` is what the Parquet writer writes
    to (a local :class:`Path`, or a multipart upload); :meth:`finish` after the writer closed
    it returns its modification time in ms; :meth:`discard` removes it."""

    def __init__(self, *, relative: str, path: Path | None = None, output: Any = None, storage: Any = None):
        self.relative = relative
        self.path = path
        self.upload = output
        self.storage = storage

    @property
    def output(self) -> Path | BinaryIO:
        return self.path if self.path is not None else self.upload

    def finish(self) -> int:
        """The file is closed: complete the upload (S3) and return its modification time (ms)."""
        if self.path is not None:
            return int(self.path.stat().st_mtime * 1000)
        record = self.upload.pending()
        self.storage.complete_upload(record.key, record.upload_id, record.parts)
        return int(time.time() * 1000)

    def discard(self) -> None:
        """A failed task's file: abort the upload or remove the object / file."""
        if self.path is not None:
            self.path.unlink(missing_ok=True)
            return
        if not self.upload.closed:
            self.upload.abandon()
        else:
            self.storage.abort_upload(self.upload.record.key, self.upload.record.upload_id)
            self.storage.delete(self.relative)


def location_from_options(raw: Mapping[str, str] | None) -> TableLocation:
    return TableLocation.from_options(Options(raw))


def load_table(table: TableLocation) -> Any:
    """The table's latest snapshot through delta-rs (a ``deltalake.DeltaTable``), None when there
    is no table (driver; deltalake is imported here, not on executors that only write files)."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        return DeltaTable(table.uri(), storage_options=table.delta_storage_options())
    except TableNotFoundError:
        return None
