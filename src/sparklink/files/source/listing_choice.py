"""Which :class:`~sparklink.files.source.listing.FileEnumerator` lists a file source's paths
(driver side, at query start): the user's ``fileEnumerator`` hook, or by default the directory
walk, Spark's log (:mod:`~sparklink.files.source.log_listing`) or an object store's key
listing (:mod:`~sparklink.files.source.object_listing`), as the store's location says. Apart
from ``listing`` so that the listings built on it are not imported by it (no import circle).
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence

from sparklink.errors import ConfigError
from sparklink.files.source.config import FileSourceConfig, FileSourceOptions
from sparklink.files.source.listing import DirectoryFileEnumerator, FileEnumerator


def load_enumerator(spec: str | None, config: FileSourceConfig | None = None, *,
                    incremental_listing_settle_ns: int | None = None) -> FileEnumerator:
    """The enumerator named by ``module:ClassName``; by default (``config`` names the paths) the
    listing the paths' store asks for (its location's ``KEY_LISTING``): the key listing of an
    object store (with ``incremental_listing_settle_ns`` a stream lists after the keys settled
    that long ago), else the directory walk, or the files of Spark's log when the one path holds
    ``_spark_metadata``."""
    if spec is None and config is not None and config.store.KEY_LISTING:
        from sparklink.files.source.object_listing import ObjectStoreFileEnumerator  # loaded for such stores only

        return ObjectStoreFileEnumerator(config.s3, incremental_listing_settle_ns=incremental_listing_settle_ns)
    if spec is None:
        from sparklink.files.source.log_listing import SparkLogFileEnumerator, has_spark_log

        paths: Sequence[str] = config.paths if config is not None else ()
        return SparkLogFileEnumerator() if has_spark_log(paths) else DirectoryFileEnumerator()
    module_name, _, class_name = spec.partition(":")
    try:
        factory = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(FileSourceOptions.file_enumerator.key, f"cannot load '{spec}': {exc}") from None
    enumerator = factory()
    if not isinstance(enumerator, FileEnumerator):
        raise ConfigError(FileSourceOptions.file_enumerator.key, f"'{spec}' is not a sparklink FileEnumerator")
    return enumerator
