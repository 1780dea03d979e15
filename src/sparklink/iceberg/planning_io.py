"""The FileIO of the ``sparklink.iceberg`` source's planning process (driver side).

PySpark plans a streaming Python source in a Python process it starts for each query, so every
module that process imports is paid once per query. Planning reads the table's metadata file,
its manifest lists and manifests, nothing else. pyiceberg's default FileIO for local tables,
``PyArrowFileIO``, lives in ``pyiceberg.io.pyarrow``, which imports ``pyarrow.dataset`` and,
through it, pandas: a quarter of a second of every query's start, for reading a few small files.

:class:`PlanningFileIO` reads local files (a path without a scheme, or ``file:`` with no host
or ``localhost``: the storage seam's :func:`~sparklink.storage.location.local_file_path`) with
Python's own file API, and hands every other location to the FileIO pyiceberg chooses for it
from the same properties (``load_file_io`` without ``py-io-impl``), created on first use. It
only reads: planning never writes, so ``new_output`` and ``delete`` are refused. The executors'
readers never use it (they read data files with pyiceberg's ``ArrowScan``, which needs
``PyArrowFileIO``). A catalog whose properties name a FileIO (``py-io-impl``) keeps it.
"""

from __future__ import annotations

import os
from typing import BinaryIO

from pyiceberg.io import PY_IO_IMPL, FileIO, InputFile, OutputFile, load_file_io

from sparklink.errors import StorageError
from sparklink.storage.location import local_file_path, scheme_of

#: The value of pyiceberg's ``py-io-impl`` property that selects this FileIO.
PLANNING_FILE_IO = f"{__name__}.PlanningFileIO"


class LocalInputFile(InputFile):
    """A local file of the table (metadata, manifest list or manifest), read with ``open``."""

    def __init__(self, location: str, path: str):
        super().__init__(location)
        self.path = path

    def __len__(self) -> int:
        return os.path.getsize(self.path)

    def exists(self) -> bool:
        return os.path.isfile(self.path)

    def open(self, seekable: bool = True) -> BinaryIO:
        try:
            return open(self.path, "rb")
        except FileNotFoundError:
            raise FileNotFoundError(f"Cannot open file, does not exist: {self.location}") from None


class PlanningFileIO(FileIO):
    """Reads the table's local files itself; other schemes through pyiceberg's own choice."""

    def __init__(self, properties: dict[str, str] | None = None):
        super().__init__(dict(properties or {}))
        self._delegates: dict[str, FileIO] = {}

    def _delegate(self, location: str) -> FileIO:
        """pyiceberg's own FileIO for ``location`` (one per URI scheme, made on first use)."""
        kind = scheme_of(location) or ""
        delegate = self._delegates.get(kind)
        if delegate is None:
            properties = {key: value for key, value in self.properties.items() if key != PY_IO_IMPL}
            delegate = self._delegates[kind] = load_file_io(properties, location)
        return delegate

    def new_input(self, location: str) -> InputFile:
        path = local_file_path(location)
        if path is None:
            return self._delegate(location).new_input(location)
        return LocalInputFile(location, path)

    def new_output(self, location: str) -> OutputFile:
        raise StorageError(f"the sparklink.iceberg source's planning only reads; it was asked to write {location}")

    def delete(self, location: str | InputFile | OutputFile) -> None:
        where = location if isinstance(location, str) else location.location
        raise StorageError(f"the sparklink.iceberg source's planning only reads; it was asked to delete {where}")


def for_planning(catalog):
    """``catalog`` with :class:`PlanningFileIO` as the FileIO of the tables it loads from now on,
    unless its properties (the options, ``.pyiceberg.yaml``, ``PYICEBERG_*`` variables, merged by
    ``load_catalog``) name one."""
    if PY_IO_IMPL not in catalog.properties:
        catalog.properties = {**catalog.properties, PY_IO_IMPL: PLANNING_FILE_IO}
    return catalog
