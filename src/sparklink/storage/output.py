"""Where a file sink's output lives and how its part files are written (driver and executors).

:class:`OutputStorage` is picklable: it travels to the executors with the sink, and each
process builds its live objects from it -- the metadata storage (:meth:`OutputStorage.storage`,
a :class:`~sparklink.storage.base.FileStorage`) and the part-file seam
(:meth:`OutputStorage.part_files`, a :class:`~sparklink.storage.recoverable.RecoverableWriter`).
S3 clients are shared per process and S3 settings (:meth:`S3Config.shared_client`: a boto3 client
costs about 0.2 s to build, so tasks and micro-batches of one Python worker share it).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sparklink.errors import ConfigError
from sparklink.options import SIZE, Option, Options
from sparklink.storage.base import FileStorage
from sparklink.storage.local import LocalStorage
from sparklink.storage.location import LocalLocation, Location, MemoryLocation, S3Location
from sparklink.storage.s3_config import DEFAULT_PART_SIZE, ON_S3, S3Config, S3Options

if TYPE_CHECKING:  # the writers are imported where files are written: a table's reader needs none
    from sparklink.storage.recoverable import RecoverableWriter


class S3OutputOptions(S3Options):
    """The S3 settings of an output the file sink writes: those of every connector and the part size."""

    group = S3Options.group

    part_size = Option("s3.partSize", SIZE, default=DEFAULT_PART_SIZE, default_doc="`8MB`", applies=ON_S3,
                       doc="the file sink's multipart upload part size (at least `5MB`, S3's minimum); a task holds "
                           "up to three parts per open file in memory (two uploading in the background, one being "
                           "filled: 24 MiB at the default)")


S3_OUTPUT_OPTIONS = S3OutputOptions.keys()

@dataclass(frozen=True, kw_only=True)
class OutputStorage:
    """An output's location, its S3 settings (None on local disk), its upload part size and
    whether part files are staged at their hidden keys (compaction reads pending files)."""

    location: Location
    s3: S3Config | None = None
    part_size: int = DEFAULT_PART_SIZE
    staged: bool = False

    def __post_init__(self) -> None:
        from sparklink.storage.s3 import MIN_PART_SIZE

        if self.part_size < MIN_PART_SIZE:
            raise ConfigError(S3OutputOptions.part_size.key, f"{self.part_size} bytes is below S3's minimum part size of "
                              f"{MIN_PART_SIZE} bytes", "5MB or more, e.g. 8MB")

    @classmethod
    def from_options(cls, location: Location, opts: Options | Mapping[str, str]) -> "OutputStorage":
        """The storage of ``location`` with the ``s3.*`` options; they are refused, naming the
        option, for a local path (driver side, at query start)."""
        opts = opts if isinstance(opts, Options) else Options(opts)
        if isinstance(location, LocalLocation):
            S3OutputOptions.check_applies(opts, ON_S3.selector, "local", shown=location.path)
            # absolute on the driver: executors may run in another working directory
            return cls(location=LocalLocation(path=os.path.abspath(location.path)))
        if isinstance(location, MemoryLocation):
            return cls(location=location)
        return cls(location=location, s3=S3Config.from_options(opts), part_size=S3OutputOptions.part_size.value(opts))

    def uri(self) -> str:
        """The output's path (local) or URI (S3), for messages and records."""
        return self.location.uri()

    def storage(self) -> FileStorage:
        """The output's metadata storage in this process (S3: on the shared client)."""
        if isinstance(self.location, S3Location):
            from sparklink.storage.s3 import S3Storage

            assert self.s3 is not None
            return S3Storage(self.location, self.s3, shared=True)
        if isinstance(self.location, MemoryLocation):
            from sparklink.storage.memory import MemoryStorage

            return MemoryStorage(self.location.name, self.location.prefix)
        return LocalStorage(self.location.path)

    def part_files(self, storage: FileStorage | None = None) -> RecoverableWriter:
        """The part-file seam of this output, on ``storage`` (else a new :meth:`storage`)."""
        storage = storage or self.storage()
        if isinstance(self.location, S3Location):
            from sparklink.storage.s3 import S3Storage
            from sparklink.storage.s3_recoverable import S3RecoverableWriter

            assert isinstance(storage, S3Storage)
            return S3RecoverableWriter(storage, part_size=self.part_size, staged=self.staged)
        if isinstance(self.location, MemoryLocation):
            from sparklink.storage.memory import MemoryRecoverableWriter, MemoryStorage

            assert isinstance(storage, MemoryStorage)
            return MemoryRecoverableWriter(storage)
        from sparklink.storage.local_recoverable import LocalRecoverableWriter

        assert isinstance(storage, LocalStorage)
        return LocalRecoverableWriter(storage)


def table_root(option: str, value: str, opts: Options | Mapping[str, str], *, kind: str) -> OutputStorage:
    """The root of a table that a library outside this process opens too (delta-rs, pyiceberg),
    from the ``option`` whose text is ``value`` and the ``s3.*`` options: a local directory (made
    absolute) or an S3 prefix of its own; a bucket's root and a memory store are refused, naming
    ``option`` and ``kind`` (``"a Delta table"``). Driver side, at query start."""
    from sparklink.storage.location import parse_location

    location = parse_location(option, value)
    if isinstance(location, S3Location) and not location.prefix:
        raise ConfigError(option, f"'{location.uri()}' names a bucket's root; {kind} needs a prefix of its own",
                          "s3://bucket/table")
    if isinstance(location, MemoryLocation):
        raise ConfigError(option, f"'{location.uri()}': {kind} lives in a local directory or under an S3 prefix, "
                          "not in a memory store (other processes and libraries cannot open it)",
                          "/path/to/table or s3://bucket/table")
    return OutputStorage.from_options(location, opts)
