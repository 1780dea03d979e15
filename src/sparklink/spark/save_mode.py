"""``df.write``'s default save mode for sparklink formats (driver side).

Spark accepts only ``append`` and ``overwrite`` for Python data sources and refuses its own
default, ``errorifexists`` (``UNSUPPORTED_DATA_SOURCE_SAVE_MODE``). So that
``df.write.format("sparklink.files")...save()`` works as written, :func:`install` (called by
``sparklink.register``) makes a ``save()`` on a ``sparklink.*`` format with no explicit
mode use ``append``. An explicit ``.mode(...)`` always wins, and other formats are untouched.
Classic PySpark only (Spark Connect has its own writer class).
"""

from __future__ import annotations

import functools

from pyspark.sql.readwriter import DataFrameWriter

SPARKLINK_PREFIX = "sparklink."
_INSTALLED = "_sparklink_default_mode_installed"


def install() -> None:
    """Install the default once per process (idempotent)."""
    if getattr(DataFrameWriter, _INSTALLED, False):
        return
    original_format, original_mode, original_save = DataFrameWriter.format, DataFrameWriter.mode, DataFrameWriter.save

    @functools.wraps(original_format)
    def format(self, source):  # noqa: A001 - the name PySpark uses
        self._sparklink_format = source
        return original_format(self, source)

    @functools.wraps(original_mode)
    def mode(self, saveMode):  # noqa: N803 - PySpark's parameter name
        if saveMode is not None:
            self._sparklink_mode_set = True
        return original_mode(self, saveMode)

    @functools.wraps(original_save)
    def save(self, path=None, format=None, mode=None, partitionBy=None, **options):  # noqa: A002 - PySpark's parameter names
        chosen = format or getattr(self, "_sparklink_format", None)
        if (mode is None and not getattr(self, "_sparklink_mode_set", False) and isinstance(chosen, str)
                and chosen.lower().startswith(SPARKLINK_PREFIX)):
            mode = "append"
        return original_save(self, path, format, mode, partitionBy, **options)

    # the patch itself: PySpark's DataFrameWriter methods replaced on purpose (the wrappers call the originals),
    # which mypy reports as method-assign
    DataFrameWriter.format = format  # type: ignore[method-assign]
    DataFrameWriter.mode = mode  # type: ignore[method-assign]
    DataFrameWriter.save = save  # type: ignore[method-assign]
    setattr(DataFrameWriter, _INSTALLED, True)
