"""The Source SDK: Flink's FLIP-27 source model (splits, enumerator, reader) in Python."""

from sparklink.source.enumerator import READ_ALL, Offset, ReadLimit, SplitEnumerator
from sparklink.source.reader import SourceReader
from sparklink.source.source import Boundedness, Source
from sparklink.source.split import Split

__all__ = ["Boundedness", "Offset", "READ_ALL", "ReadLimit", "Source", "SourceReader", "Split", "SplitEnumerator"]
