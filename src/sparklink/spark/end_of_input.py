"""End of input: what a streaming query that ends without a crash makes visible (driver side).

Flink finishes every in-progress and pending file when a bounded input ends (FLIP-147). Spark
does not tell a Python sink that its query ended: the last ``commit(messages, batchId)`` of an
``availableNow`` run looks like any other. So a sink declares what its end of input is
(:meth:`sparklink.sink.Sink.end_of_input`; the file sink: ``finish`` its held and carried
files), and three pieces run it when the query ends without an exception (``availableNow`` done,
``query.stop()``):

1. **The note.** The worker that commits a micro-batch (a Python worker of the driver's JVM, so
   on the driver's machine) writes the sink's end-of-input action, once per query, to
   ``<tmp>/sparklink-<uid>/end-of-input/<jvm pid>-<jvm start>/<queryId>.json``: a private
   directory of this machine named after that JVM.
2. **The listener.** :func:`install` (called by ``sparklink.register(spark)``) adds a
   ``StreamingQueryListener`` to the session. When a query terminates without an exception and
   a note names it, the listener runs the action and removes the note. A query that failed is
   left as it is: its next start rolls forward, and ``sparklink.files.finish`` finishes an
   output whose query will not run again.
3. **The barrier.** Spark delivers listener events on a thread of its own, after
   ``awaitTermination()`` has returned, so a driver script that returns right away could exit
   before the listener ran. :func:`install` also registers an ``atexit`` hook that waits until
   Spark's listener bus is empty (every delivered event handled, ours included) before the
   interpreter exits; ``spark.stop()`` drains the bus itself.

A crash (the driver killed) runs none of this; the next start of the query rolls its commits
forward, and its own end of input finishes the output.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pyspark.sql.streaming import StreamingQueryListener

from sparklink.sink.lease import DriverIdentity, current_driver, driver_of_session
from sparklink.sink.sink import EndOfInput

logger = logging.getLogger("sparklink.end_of_input")

DRAIN_TIMEOUT_MS = 30 * 60 * 1000  # a finish that compacts many held files may take minutes


def _finish_files(target: str, driver: DriverIdentity | None, active_queries: Callable[[], frozenset[str]]) -> str:
    from sparklink.files.sink.finish import finish_output

    result = finish_output(target, spark_driver=driver, active_queries=active_queries)
    return result.summary()


#: The actions a note may name (never code named by the note itself).
ACTIONS = {"files.finish": _finish_files}


def _notes_dir(driver: DriverIdentity) -> Path:
    uid = os.getuid() if hasattr(os, "getuid") else 0
    return Path(tempfile.gettempdir()) / f"sparklink-{uid}" / "end-of-input" / f"{driver.pid}-{driver.started}"


def note_end_of_input(query_id: str | None, action: EndOfInput | None) -> None:
    """In the worker that commits a micro-batch (driver's machine), every commit: note the
    query's end-of-input action (written once per query; a cheap existence check after)."""
    if query_id is None or action is None:
        return
    directory = _notes_dir(current_driver())
    note = directory / f"{query_id}.json"
    if note.exists():
        return
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = directory / f".{query_id}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(action.to_json()), encoding="utf-8")
    os.replace(tmp, note)


def run_end_of_input(query_id: str, driver: DriverIdentity | None,
                     active_queries: Callable[[], frozenset[str]] = frozenset) -> str | None:
    """Driver process: run the action noted for ``query_id`` (None: no note), then remove the
    note. An error is raised to the caller with the note kept (the next end retries).
    ``active_queries`` gives the session's active query ids (asked under the output's lock: a
    query restarted meanwhile owns its output again, and the action is refused)."""
    if driver is None:
        return None
    note = _notes_dir(driver) / f"{query_id}.json"
    try:
        action = EndOfInput.from_json(json.loads(note.read_text(encoding="utf-8")))
    except FileNotFoundError:
        return None
    function = ACTIONS.get(action.kind)
    if function is None:
        raise ValueError(f"{note}: end-of-input action '{action.kind}' is not one of {', '.join(sorted(ACTIONS))}")
    outcome = function(action.target, driver, active_queries)
    note.unlink(missing_ok=True)
    return f"{action.target}: {outcome}"


class EndOfInputListener(StreamingQueryListener):
    """Runs a sink's end of input when its query terminates without an exception (driver
    process, on Spark's listener thread, once per query end)."""

    def __init__(self, spark: Any, driver: DriverIdentity | None):
        self.spark = spark
        self.driver = driver

    def _active_queries(self) -> frozenset[str]:
        spark = self.spark  # PySpark's property (Optional): set in __init__
        assert spark is not None
        return frozenset(str(query.id) for query in spark.streams.active)

    def onQueryStarted(self, event: Any) -> None:
        pass

    def onQueryProgress(self, event: Any) -> None:
        pass

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        if event.exception is not None:
            return  # a failed query: its next start rolls forward; nothing is finished over it
        try:
            said = run_end_of_input(str(event.id), self.driver, self._active_queries)
        except Exception as exc:  # noqa: BLE001 - an event handler must not die: the log says what to run
            logger.warning("query %s ended, but finishing its output failed: %s; committed files are safe; "
                           "run sparklink.files.finish(spark, path) once nothing writes the output", event.id, exc)
            return
        if said is not None:
            logger.info("end of input of query %s: %s", event.id, said)
            with _lock:
                _done[str(event.id)] = said


_installed: dict[int, EndOfInputListener | None] = {}  # None: the session has none (install(enabled=False))
_done: dict[str, str] = {}  # query id -> what its end of input did (this process)
_lock = threading.Lock()


def _wait_for_listener_bus(context: Any) -> None:
    """Until Spark's listener bus of ``context`` (a SparkContext) has handled every event posted
    so far, ours included: Spark posts a query's termination before ``awaitTermination()``
    returns, so after this its end of input has run."""
    context._jsc.sc().listenerBus().waitUntilEmpty(DRAIN_TIMEOUT_MS)


def await_end_of_input(spark: Any, query_ids: list[str]) -> dict[str, str]:
    """Driver process, after queries of ``spark`` terminated: wait until their end of input ran
    (Spark's listener bus is empty), and say what each did (query id -> summary; queries whose
    end of input had nothing to do are absent)."""
    _wait_for_listener_bus(spark.sparkContext)
    with _lock:
        return {query_id: _done[query_id] for query_id in query_ids if query_id in _done}


def _drain_listener_bus() -> None:
    """atexit: wait until Spark's listener bus delivered every event (our handler ran)."""
    from pyspark import SparkContext

    context = SparkContext._active_spark_context
    if context is None:
        return  # stopped: SparkContext.stop() drained the bus already
    try:
        _wait_for_listener_bus(context)
    except Exception as exc:  # noqa: BLE001 - at exit: say what was not waited for, never hide it
        logger.warning("at exit, Spark's listener events were not all handled (%s): an output whose query "
                       "just ended may keep held files hidden; run sparklink.files.finish(spark, path)", exc)


def install(spark: Any, *, enabled: bool = True) -> None:
    """Driver side, from ``sparklink.register(spark)``: the listener once per session and the
    exit barrier once per process; the first call for a session decides (``enabled=False``:
    none for this session). Spark Connect sessions have no listener here (no JVM in this
    process): their outputs are finished by ``sparklink.files.finish``."""
    driver = driver_of_session(spark)
    if driver is None:
        return
    with _lock:
        key = spark._jsparkSession.hashCode()
        if key in _installed:
            return
        if not enabled:
            _installed[key] = None
            return
        if not any(_installed.values()):
            atexit.register(_drain_listener_bus)
        listener = EndOfInputListener(spark, driver)
        spark.streams.addListener(listener)
        _installed[key] = listener


@contextmanager
def listening(spark: Any) -> Iterator[EndOfInputListener]:
    """A listener on ``spark`` for the duration of the block, whatever :func:`install` decided
    for the session (tests of the end of input in a shared session)."""
    listener = EndOfInputListener(spark, driver_of_session(spark))
    spark.streams.addListener(listener)
    try:
        yield listener
    finally:
        _wait_for_listener_bus(spark.sparkContext)
        spark.streams.removeListener(listener)
