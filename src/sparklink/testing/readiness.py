"""The one start loop of the harness's servers (test side): wait until a server answers.

PostgreSQL, Tansu, Apache Kafka, Cassandra, SeaweedFS, the Spark Connect server and the
standalone cluster all start the same way: launch, then ask until the server answers, giving
up when its process exits or a deadline passes, with the end of its log in the error.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable


def wait_until_ready(what: str, answers: Callable[[], object], *, timeout: float,
                     process: subprocess.Popen | None = None, log_tail: Callable[[], str] = lambda: "",
                     stop: Callable[[], None] | None = None, retry_on: tuple[type[BaseException], ...] = (),
                     interval: float = 0.2) -> None:
    """Call ``answers()`` until it returns a true value. An exception of ``retry_on`` (the
    server is still starting) or a false value is asked again after ``interval`` seconds. When
    ``process`` has exited, or ``timeout`` seconds have passed, ``stop()`` is called and a
    RuntimeError names ``what``, the exit status or the last exception, and ``log_tail()``."""
    deadline = time.monotonic() + timeout
    last: BaseException | None = None
    while True:
        if process is not None and process.poll() is not None:
            tail = log_tail()
            if stop is not None:
                stop()
            raise RuntimeError(f"{what} exited with status {process.returncode} while starting; its log ends:\n{tail}")
        try:
            if answers():
                return
        except retry_on as exc:
            last = exc
        if time.monotonic() > deadline:
            tail = log_tail()
            if stop is not None:
                stop()
            because = f" (last error: {last})" if last is not None else ""
            raise RuntimeError(f"{what} did not answer within {timeout:.0f} s{because}; its log ends:\n{tail}") from last
        time.sleep(interval)
