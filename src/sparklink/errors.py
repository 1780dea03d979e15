"""The sparklink exception tree.

Every error sparklink raises on purpose derives from :class:`SparklinkError`, so a user can
catch the whole family in one ``except`` clause. Messages name the option, file or line at
fault and, where it helps, the accepted values.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager


class SparklinkError(Exception):
    """Root of every error raised by sparklink on purpose."""


class ConfigError(SparklinkError, ValueError):
    """An option or builder argument is missing, unknown or has a bad value.

    Raised when a query starts, before any data is written.
    """

    def __init__(self, option: str, problem: str, accepted: str | None = None):
        self.option = option
        self.problem = problem
        self.accepted = accepted
        text = f"option '{option}': {problem}"
        if accepted:
            text += f" (accepted: {accepted})"
        super().__init__(text)


class CommitError(SparklinkError):
    """A commit could not be completed; nothing half-committed is visible to readers."""


class MetadataError(CommitError):
    """A sink's metadata file (commit log entry, committed state, owner claim) is missing,
    unreadable or contradicts the others, and recovery cannot rebuild it exactly.

    The message names the file and the way out; nothing committed has been changed.
    """


class ConcurrentWriterError(SparklinkError):
    """A second query tried to write to an output that another query owns."""


class FaultInjected(SparklinkError):
    """Raised by a named fault point that is configured to fail rather than kill."""


class DataError(SparklinkError):
    """Bad input data: a malformed record, a corrupt or truncated file, schema drift.

    The message names the file and, where known, the line or byte offset.
    """


class StorageError(SparklinkError, OSError):
    """A request to the file storage (local disk or an object store) failed.

    The message names the operation, the object and the store's endpoint, never a credential.
    """


class SplitError(SparklinkError):
    """A split or its serialised state is invalid."""


_ERRNO_IN_TEXT = re.compile(r"\[errno (\d+)\]", re.IGNORECASE)


@contextmanager
def naming_path(path: str | os.PathLike[str]) -> Iterator[None]:
    """Re-raise an ``OSError`` that names no file with ``path`` in it (any side, any caller).

    A full disk surfaces as ``[Errno 28] No space left on device`` from ``write`` / ``fsync``
    and as ``Error writing bytes to file. Detail: [errno 28] ...`` from Arrow's writers, neither
    naming the file; the error raised here is ``[Errno 28] No space left on device: '<path>'``
    (same errno, so the same ``OSError`` subclass)."""
    try:
        yield
    except OSError as exc:
        if exc.filename is not None:
            raise
        code = exc.errno
        if code is None:
            match = _ERRNO_IN_TEXT.search(str(exc))
            code = int(match.group(1)) if match else None
        if code is None:
            raise OSError(f"{exc}: '{os.fspath(path)}'") from exc
        raise OSError(code, os.strerror(code), os.fspath(path)) from exc
