"""OutputFileConfig: the prefix and suffix of part-file names (Flink's OutputFileConfig).

A plain value object, built on the driver from the ``partPrefix`` / ``partSuffix`` options
or by the builder, and pickled to executors with the sink.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from sparklink.errors import ConfigError
from sparklink.files.sink.options import DEFAULT_PART_PREFIX
from sparklink.files.sink.options import FileSinkOptions as O

PART_PREFIX, PART_SUFFIX = O.part_prefix.key, O.part_suffix.key


@dataclass(frozen=True, kw_only=True)
class OutputFileConfig:
    """Finished files are named ``<part_prefix>-<writerUid>-<n><part_suffix>``.

    ``part_suffix`` None means "the format's usual extension" (``.parquet``, ``.json``, ...).
    """

    part_prefix: str = DEFAULT_PART_PREFIX
    part_suffix: str | None = None

    def __post_init__(self) -> None:
        prefix = self.part_prefix
        if not prefix or prefix[0] in "._" or "/" in prefix or "\\" in prefix:
            raise ConfigError(PART_PREFIX, f"'{prefix}' is not usable: it must be non-empty, contain no "
                              "path separator and not start with '.' or '_' (readers would skip the files)")
        suffix = self.part_suffix
        if suffix is not None and ("/" in suffix or "\\" in suffix or ".inprogress" in suffix):
            raise ConfigError(PART_SUFFIX, f"'{suffix}' is not usable: no path separator and no '.inprogress'")

    def with_part_prefix(self, prefix: str) -> "OutputFileConfig":
        return dataclasses.replace(self, part_prefix=prefix)

    def with_part_suffix(self, suffix: str) -> "OutputFileConfig":
        return dataclasses.replace(self, part_suffix=suffix)

    def suffix_for(self, default_extension: str) -> str:
        return default_extension if self.part_suffix is None else self.part_suffix

    @staticmethod
    def builder() -> "OutputFileConfig":
        """PyFlink spelling: ``OutputFileConfig.builder().with_part_prefix("p").with_part_suffix(".x")``."""
        return OutputFileConfig()

    def build(self) -> "OutputFileConfig":
        return self

    def to_options(self) -> dict[str, str]:
        options = {PART_PREFIX: self.part_prefix}
        if self.part_suffix is not None:
            options[PART_SUFFIX] = self.part_suffix
        return options
