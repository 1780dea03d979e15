"""The committer (Flink's Committer and CommitRequest), run on the driver.

Spark calls the sink's ``commit(messages, batchId)`` once every task of a micro-batch has
succeeded; the adapter wraps each committable in a :class:`CommitRequest` and hands them to
:meth:`Committer.commit`. As in Flink, each request ends in one of these states:

* committed (the default when the committer does not signal anything);
* ``signal_already_committed()``: the effect is already there (a replay), fine;
* ``retry_later()`` / ``update_and_retry_later(c)``: transient failure, try again;
* ``signal_failed_with_known_reason(e)``: the committable is dropped with a warning, the
  query goes on (Flink's semantics: data loss the user accepted, e.g. a file removed by hand);
* ``signal_failed_with_unknown_reason(e)``: the query fails with a CommitError.

Commits must be idempotent: after a crash the same requests are committed again.
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from dataclasses import dataclass, field

from sparklink.sink.writer import Committable


class CommitStatus(enum.Enum):
    PENDING = "pending"
    COMMITTED = "committed"
    ALREADY_COMMITTED = "already_committed"
    RETRY = "retry"
    FAILED_KNOWN = "failed_known"
    FAILED_UNKNOWN = "failed_unknown"


@dataclass(kw_only=True)
class CommitRequest:
    """One committable on its way to being committed (driver side)."""

    committable: Committable
    batch_id: int | None
    number_of_retries: int = 0
    status: CommitStatus = CommitStatus.PENDING
    failure: BaseException | None = field(default=None, repr=False)

    def retry_later(self) -> None:
        self.status = CommitStatus.RETRY

    def update_and_retry_later(self, committable: Committable) -> None:
        self.committable = committable
        self.status = CommitStatus.RETRY

    def signal_already_committed(self) -> None:
        self.status = CommitStatus.ALREADY_COMMITTED

    def signal_failed_with_known_reason(self, failure: BaseException) -> None:
        self.status = CommitStatus.FAILED_KNOWN
        self.failure = failure

    def signal_failed_with_unknown_reason(self, failure: BaseException) -> None:
        self.status = CommitStatus.FAILED_UNKNOWN
        self.failure = failure


class Committer(ABC):
    """Makes staged data visible (driver side, inside Spark's ``commit``).

    Created for each commit; it may open connections, which :meth:`close` releases.
    """

    @abstractmethod
    def commit(self, requests: list[CommitRequest]) -> None:
        """Commit every request, signalling per request as described in the module docstring.
        Must be idempotent per committable."""

    def close(self) -> None:
        """Release handles opened by :meth:`commit`."""
