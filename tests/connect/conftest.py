"""Helpers of the Spark Connect tests (the sessions are the harness's ``spark`` and
``connect_spark`` fixtures): the record of JVM attributes asked of a Connect session, and the
one line a sparklink error leaves in Spark's message."""

from __future__ import annotations

import pytest

#: What a Spark Connect session does not have (PySpark's Connect session refuses each by name).
JVM_ATTRIBUTES = {"sparkContext", "_jsc", "_jvm", "_jsparkSession", "_jconf"}


@pytest.fixture
def jvm_attributes_touched(monkeypatch) -> list[str]:
    """The JVM attributes asked of any Spark Connect session while the test runs (a list the
    test checks is empty): PySpark's Connect session answers them in ``__getattr__``, recorded
    here before it refuses them (a caller catching the refusal would hide it otherwise)."""
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    touched: list[str] = []
    original = ConnectSession.__getattr__

    def recording(self, name):
        if name in JVM_ATTRIBUTES:
            touched.append(name)
        return original(self, name)

    monkeypatch.setattr(ConnectSession, "__getattr__", recording)
    return touched


def sparklink_error_line(error: BaseException) -> str:
    """The line a sparklink error raised by a data source leaves in Spark's message (classic:
    the Python traceback inside the JVM's exception; Connect: the same text carried by gRPC), or
    the first line of the message when there is none."""
    from sparklink.cli.run_command import describe_failure

    return describe_failure(error)
