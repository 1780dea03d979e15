"""Driver jobs of the resource-fault tests (run in a driver process as the user 'nobody')."""

from __future__ import annotations

import json
from pathlib import Path

from sparklink.testing import error_text
from sparklink.testing.conformance.jobs import sequence_to_sink


def sink_each_output_and_record_errors(spark, *, runs: dict, report: str) -> None:
    """Run ``sequence_to_sink`` for each ``{name: args}`` of ``runs`` one after the other in this
    driver; write ``{name: error text or None}`` to ``report``. A failing run does not stop the next."""
    errors = {}
    for name, args in runs.items():
        try:
            sequence_to_sink(spark, **args)
            errors[name] = None
        except Exception as exc:  # noqa: BLE001 - every failure is recorded with its whole chain
            errors[name] = error_text(exc)
    Path(report).write_text(json.dumps(errors))
