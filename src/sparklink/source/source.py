"""The source (Flink's Source): a factory for the enumerator and the readers.

A source is built from the connector's string options on the driver, pickled to executors,
and asked there for a reader. It must therefore hold only plain, picklable configuration.
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from collections.abc import Mapping

from pyspark.sql.types import StructType

from sparklink.source.enumerator import READ_ALL, ReadLimit, SplitEnumerator
from sparklink.source.reader import SourceReader


class Boundedness(enum.Enum):
    """Whether a source ends (BATCH, ``spark.read``) or keeps producing (``spark.readStream``)."""

    BOUNDED = "bounded"
    CONTINUOUS_UNBOUNDED = "continuous_unbounded"


class Source(ABC):
    """Ties a split enumerator and a source reader together.

    Subclasses take the options in ``__init__(options)`` and validate them there, raising
    :class:`~sparklink.errors.ConfigError` with the option's name.
    """

    def __init__(self, options: Mapping[str, str] | None = None):
        self.options = dict(options or {})

    @property
    def boundedness(self) -> Boundedness:
        return Boundedness.CONTINUOUS_UNBOUNDED

    @abstractmethod
    def schema(self) -> StructType:
        """The schema of the records (driver side). Called when the user gives none."""

    @abstractmethod
    def create_enumerator(self, *, streaming: bool) -> SplitEnumerator:
        """A new enumerator (driver side); ``streaming`` is False for ``spark.read``."""

    @abstractmethod
    def create_reader(self, schema: StructType) -> SourceReader:
        """A new reader (executor side) that yields records of ``schema``."""

    def default_read_limit(self) -> ReadLimit:
        """The per-trigger limit from the options (maxRowsPerTrigger, ...); everything by default."""
        return READ_ALL
