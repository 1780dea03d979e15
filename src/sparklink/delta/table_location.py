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
  (:meth:`delta_storage_options`), derived from the same settings by the seam
  (:meth:`sparklink.storage.FileStorage.object_store_options`).

Every store-specific step is the seam's (:mod:`sparklink.storage`): nothing here asks which
store the table is on.

Commits on S3 are safe against concurrent writers only through S3 conditional writes: delta-rs
1.6.6 writes a commit file ``_delta_log/<version>.json`` with ``PutMode::Create``
(``If-None-Match: *``) unless ``AWS_S3_ALLOW_UNSAFE_RENAME`` or ``AWS_S3_LOCKING_PROVIDER`` is
set, in which case it copies a temporary file to the commit's name and deletes it (not atomic:
two writers may both "win" one version; its DynamoDB locking is gone in 1.x). So the storage
options pass ``AWS_S3_ALLOW_UNSAFE_RENAME=false`` and refuse an environment that sets either
variable (:func:`sparklink.storage.s3_config.object_store_options`), and the sink probes the
store's conditional writes once per run (:meth:`check_conditional_writes`), as the file sink does.

The value is frozen and pickled to executors; the live clients are built in each process and
cached there (never pickled).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import pyarrow as pa

from sparklink.options import Option, Options, string
from sparklink.storage import FileStorage, Location, S3Config, open_storage
from sparklink.storage.base import NewFile
from sparklink.storage.new_file import create_file
from sparklink.storage.output import table_root
from sparklink.storage.s3_config import UNSAFE_ENVIRONMENT, S3Options, to_options

__all__ = ["PATH", "UNSAFE_ENVIRONMENT", "DataFile", "DeltaTableOptions", "TableLocation", "load_table",
           "location_from_options"]


class DeltaTableOptions(S3Options):
    """Where a Delta table lives: the options the sink and the source share."""

    path = Option("path", string("a directory, or `s3://bucket/prefix` / `s3a://...`"), required=True,
                  doc="the table (`.save(path)` / `.load(path)` set it)")


PATH = DeltaTableOptions.path.key

_STORAGES: dict[TableLocation, FileStorage] = {}


@dataclass(frozen=True, kw_only=True)
class TableLocation:
    """``location`` (local or S3) and, on S3, the connection settings."""

    location: Location
    s3: S3Config | None = None

    @classmethod
    def from_options(cls, options: Options) -> TableLocation:
        """Driver side, at query start: ``path`` and the ``s3.*`` options (refused on a local path)."""
        root = table_root(PATH, DeltaTableOptions.path.value(options), options, kind="a Delta table")
        return cls(location=root.location, s3=root.s3)

    def uri(self) -> str:
        """What delta-rs opens: the local path, or ``s3://bucket/prefix`` (``s3a`` kept as given)."""
        return self.location.uri()

    def describe(self) -> str:
        return self.storage().describe()

    # ---------------------------------------------------------------- storage seam
    def storage(self) -> FileStorage:
        """This process's storage of the table (built once per process, never pickled)."""
        storage = _STORAGES.get(self)
        if storage is None:
            storage = _STORAGES[self] = open_storage(self.location, to_options(self.s3))
        return storage

    def check_conditional_writes(self) -> None:
        """Driver: refuse a store that ignores ``If-None-Match`` (delta-rs's commits would then
        overwrite each other), unless ``s3.allowUnconditionalWrites``."""
        self.storage().check_conditional_writes()

    def open_data_file(self, relative: str) -> DataFile:
        """Executor: a new data file at ``relative`` (``/``-separated, under the table)."""
        return DataFile(create_file(self.storage(), relative))

    def delete(self, relative: str) -> None:
        self.storage().delete(relative)

    def names_in(self, directory: str, prefix: str) -> list[str]:
        """Relative paths of the files directly in ``directory`` (``""``: the root) whose name
        starts with ``prefix`` (on S3 one ListObjectsV2 of exactly that key prefix: the cost
        follows the matching files, not the directory's)."""
        return [f"{directory}/{n}" if directory else n for n in self.storage().names(directory, prefix)]

    def read_bytes(self, relative: str) -> bytes | None:
        """The whole content of ``relative`` (a commit file), None if it does not exist."""
        stored = self.storage().read(relative)
        return None if stored is None else stored.data

    def modified_at(self, relative: str) -> float | None:
        """Modification time (epoch seconds; S3: ``LastModified``) of ``relative``, None if absent."""
        info = self.storage().info(relative)
        return None if info is None else info.modified_at

    def open_input(self, relative: str) -> Any:
        """``relative`` for pyarrow's readers (executor): a random-access file."""
        return self.storage().open_input(relative)

    # ---------------------------------------------------------------- delta-rs
    def delta_storage_options(self) -> dict[str, str] | None:
        """delta-rs's ``storage_options`` (driver; built for each use, so short-lived
        credentials of the AWS chain are fresh): the seam's settings of the Rust
        ``object_store`` crate, None for a store that needs none. Holds secrets: never log or
        show it."""
        return self.storage().object_store_options()


class DataFile:
    """One data file being written (executor): ``output`` is what the Parquet writer writes
    to; :meth:`finish` after the writer closed it returns its modification time in ms;
    :meth:`discard` removes it. A :class:`~sparklink.storage.base.NewFile` of the seam."""

    def __init__(self, file: NewFile):
        self.file = file
        self.relative = file.key

    @property
    def output(self) -> Path | BinaryIO:
        return self.file.target

    def finish(self) -> int:
        """The file is closed: make it whole (S3: complete the upload); its modification time (ms)."""
        return int(self.file.finish() * 1000)

    def discard(self) -> None:
        """A failed task's file: abort the upload or remove the object / file."""
        self.file.discard()


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


def from_delta_rs(data: Any) -> pa.Table:
    """A pyarrow table of what delta-rs hands over (its own Arrow tables and record batch
    readers), read through the Arrow C stream interface (driver).

    Not ``pa.table(...)`` / ``pa.record_batch(...)``: pyarrow's constructors import pandas to look
    at their argument, 0.27 s paid again in every streaming query's planning process (PySpark
    starts a fresh one per query)."""
    return pa.RecordBatchReader.from_stream(data).read_all()


def add_actions(table: Any) -> pa.Table:
    """The ``add`` actions of a ``deltalake.DeltaTable``'s snapshot, flattened (``partition.<c>``,
    statistics), as a pyarrow table (driver)."""
    return from_delta_rs(table.get_add_actions(flatten=True))
