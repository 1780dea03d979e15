"""The Sink SDK: Flink's Sink V2 model (writers, committables, committer) in Python."""

from sparklink.sink.commit_log import CommitLog, CommitLogEntry
from sparklink.sink.committer import CommitRequest, CommitStatus, Committer
from sparklink.sink.sink import Sink
from sparklink.sink.writer import Committable, SinkWriter, WriterContext

__all__ = ["Committable", "CommitLog", "CommitLogEntry", "CommitRequest", "CommitStatus", "Committer",
           "Sink", "SinkWriter", "WriterContext"]
