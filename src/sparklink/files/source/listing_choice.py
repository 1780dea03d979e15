"""Which :class:`~sparklink.files.source.listing.FileEnumerator` lists a file source's paths
(driver side, at query start): the user's ``fileEnumerator`` hook, or by default the directory
walk, Spark's log (:mod:`~sparklink.files.source.log_listing`) or S3 listings
(:mod:`~sparklink.files.source.object_listing`). Apart from ``listing`` so that the listings
built on it are not imported by it (no import circle).
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence

from sparklink.errors import ConfigError
from sparklink.files.source.config import FileSourceOptions
from sparklink.files.source.listing import DirectoryFileEnumerator, FileEnumerator
from sparklink.storage.s3_config import S3Config


def load_enumerator(spec: str | None, paths: Sequence[str] = (), s3: S3Config | None = None, *,
                    incremental_listing_settle_ns: int | None = None) -> FileEnumerator:
    """The enumerator named by ``module:ClassName``; by default the directory walk, or the
    files of Spark's log when the one path holds ``_spark_metadata``, or ListObjectsV2 when the
    paths are S3 prefixes (``s3`` is then their connection settings; with
    ``incremental_listing_settle_ns`` a stream lists after the keys settled that long ago)."""
    if spec is None and s3 is not None:
        from sparklink.files.source.object_listing import ObjectStoreFileEnumerator  # loaded for S3 paths only

        return ObjectStoreFileEnumerator(s3, incremental_listing_settle_ns=incremental_listing_settle_ns)
    if spec is None:
        from sparklink.files.source.log_listing import SparkLogFileEnumerator, has_spark_log

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
