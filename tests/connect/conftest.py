"""Fixtures of the Spark Connect tests: ``any_spark`` runs a test once in the classic session
(``spark``) and once in a Connect client session of the shared Connect server (``connect_spark``)."""

from __future__ import annotations

import pytest


@pytest.fixture(params=["classic", "connect"])
def any_spark(request):
    """The classic session, then a Spark Connect client session (same sparklink, same test)."""
    return request.getfixturevalue("spark" if request.param == "classic" else "connect_spark")


def sparklink_error_line(error: BaseException) -> str:
    """The line a sparklink error raised by a data source leaves in Spark's message (classic:
    the Python traceback inside the JVM's exception; Connect: the same text carried by gRPC), or
    the first line of the message when there is none."""
    from sparklink.cli.run_command import describe_failure

    return describe_failure(error)
