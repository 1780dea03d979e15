"""``sparklink.files.finish(spark, path)``: the Spark-facing entry of the file sink's finish
(driver side, once per bounded run). It finds what only the Spark adapter knows -- which process
finishes, the session's driver JVM, the session's active queries, whether the session is a
Spark Connect client -- and hands it to the Spark-free
:func:`sparklink.files.sink.finish.finish_output`. ``sparklink.files`` exports it by name (a lazy
reference in its ``__init__``, not an import: ``files/`` never calls up the layers).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sparklink.errors import ConfigError
from sparklink.files.sink.finish import FinishResult, finish_output
from sparklink.spark.driver import current_driver, driver_of_session, is_connect


def finish(spark: Any, path: str | Path, *, options: Mapping[str, str] | None = None) -> FinishResult:
    """``sparklink.files.finish(spark, path)``: after the query that writes ``path`` stopped,
    make its held (compaction) and carried (``default`` rolling policy) files visible, exactly
    once (driver side, once per bounded run; ``sparklink run`` calls it after an
    ``availableNow`` pipeline).

    Refused (ConcurrentWriterError naming the query, its driver and until when it holds the
    output) while a query owns the output: a query of ``spark`` that is active, or a query in
    any driver whose lease (renewed at every micro-batch, ``leaseTimeout``) has not expired and
    whose driver is not observably gone. A query of ``spark``'s own session that has stopped
    is finished at once. ``spark`` may be None (no session: only the lease decides).

    ``path`` may be local or on S3 (``s3://`` / ``s3a://``). The sink's options are read from its
    record in the output, which holds no secret: S3 settings (endpoint, credentials) come from
    ``options`` (the sink's ``s3.*`` options, e.g. ``{"s3.endpoint": ..., "s3.accessKeyId": ...}``;
    any other key is refused) and else from the AWS environment (``AWS_ENDPOINT_URL_S3``,
    ``AWS_ACCESS_KEY_ID``, a profile, ...).

    From a Spark Connect session the finish runs on the server's driver (a batch read of
    ``sparklink.endOfInput``, :func:`sparklink.spark.end_of_input.run_on_server`): the output
    need only be reachable from there, and ``options`` travel with the read."""
    if is_connect(spark):  # the files are the server's
        from sparklink.spark.end_of_input import connect_installed, run_on_server

        if not connect_installed(spark):
            raise ConfigError("spark", "is a Spark Connect session without sparklink: call sparklink.register(spark) "
                              "first (it registers the data source that runs the finish on the server)")
        rows = run_on_server(spark, {"path": str(path), **dict(options or {})})
        return FinishResult.from_json(json.loads(rows[0]["result"]))
    active = frozenset(str(query.id) for query in spark.streams.active) if spark is not None else frozenset()
    session = driver_of_session(spark)
    return finish_output(path, driver=current_driver(), session_drivers=frozenset({session} if session else ()),
                         active_queries=active, options=options)
