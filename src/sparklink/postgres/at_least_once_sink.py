"""``semantic=at-least-once``: plain COPY append, committed by each task (executor side).

A retried task or a replayed batch appends its rows again; there is no commit log. This is
what Spark's JDBC writer and ``foreachBatch`` give, at COPY speed.
"""

from __future__ import annotations

import psycopg

from sparklink.postgres.sink_base import CopyingWriter, PostgresSink
from sparklink.sink import CommitRequest, Committable, Committer, WriterContext


class AppendWriter(CopyingWriter):
    """Executor side: COPY into the target, commit at the end of the task."""

    def prepare_commit(self) -> list[Committable]:
        if not self.has_rows:
            return []
        assert self.conn is not None  # has_rows
        self.apply_changes()
        try:
            self.conn.commit()
        except psycopg.Error as exc:
            raise self.config.connection.error(f"committing rows into {self.config.table}", exc) from None
        return []


class NoOpCommitter(Committer):
    """The rows are committed by the tasks; nothing is left to do on the driver."""

    def commit(self, requests: list[CommitRequest]) -> None:
        for request in requests:
            request.signal_already_committed()


class AtLeastOnceSink(PostgresSink):
    def create_writer(self, context: WriterContext) -> AppendWriter:
        return AppendWriter(self, context)

    def create_committer(self) -> Committer:
        return NoOpCommitter()

    def commit_log_dir(self) -> None:
        return None
