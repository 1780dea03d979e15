"""The runtime's fault-point hook (driver and executor side): a no-op unless a test armed it.

Commit protocols call ``fault_point("sink.after_log", batch_id=...)`` at their named steps. In
production the call costs one environment look-up and returns. A test harness arms points
through the environment (``SPARKLINK_FAULT``), because the processes that must crash or fail
are Spark's own: the driver's JVM starts Python workers, and executors start theirs, so an
in-process registration would never reach them, while the environment is inherited by all.

Only when ``SPARKLINK_FAULT`` is set does the hook load the harness's implementation,
:mod:`sparklink.testing.faults` (which parses the variable, honours once-markers, batch and
attempt filters, and kills or raises). The runtime never imports the harness otherwise.
"""

from __future__ import annotations

import os

ENV_FAULT = "SPARKLINK_FAULT"


def fault_point(point: str, *, batch_id: int | None = None, attempt: int | None = None) -> None:
    """Crash or fail here if a test armed ``point``; otherwise return at once."""
    if ENV_FAULT not in os.environ:
        return
    from sparklink.testing.faults import fire  # armed by a test: the harness decides

    fire(point, batch_id=batch_id, attempt=attempt)
