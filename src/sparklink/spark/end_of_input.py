"""End of input: what a streaming query that ends without a crash makes visible, before
``awaitTermination()`` returns (driver side).

Flink finishes every in-progress and pending file when a bounded input ends (FLIP-147). Spark
does not tell a Python sink that its query ended: the last ``commit(messages, batchId)`` of an
``availableNow`` run looks like any other, and a restart that finds no new input runs no
micro-batch and no code of the sink at all. So a sink declares what its end of input is
(:meth:`sparklink.sink.Sink.end_of_input`; the file sink: ``finish`` its held and carried
files), and these pieces run it when the query ends without an exception:

1. **The note.** The worker that commits a micro-batch (a Python worker of the driver's JVM, so
   on the driver's machine) writes the sink's end-of-input action, once per query, to
   ``<tmp>/sparklink-<uid>/end-of-input/queries/<queryId>.json`` (a private directory of this
   machine). The note outlives the JVM: a run killed after its commits leaves it, and the next
   run of the query (same id, from the checkpoint), on this machine, finds it at its own end,
   whether or not that run had a micro-batch.
2. **The caller's wait.** :func:`install` (``sparklink.register(spark)``) wraps PySpark's
   ``StreamingQuery.awaitTermination``, ``stop`` and ``processAllAvailable``: when the query
   has terminated without an exception, they run its end of input in the calling thread before
   they return, and raise its error. ``SparkSession.stop()`` first stops the session's active
   queries that way (a query Spark's own stop would kill with a NullPointerException, a
   failure, so that nothing would be finished).
3. **The listener.** A ``StreamingQueryListener`` runs the same for a query that ended while
   nobody waited on it; an exit barrier registered with :mod:`threading`'s shutdown hooks (they
   run before ``concurrent.futures`` refuses new work and before ``atexit`` handlers such as
   pyarrow's S3 finalizer) waits until Spark's listener bus has handled every event.

Running the action claims the note first (an atomic rename), so the caller and the listener
never run it twice, and a commit of a run started meanwhile writes a note of its own. A failed
action puts the note back (the next end retries). A query that failed is left as it is: its
next start rolls forward, and ``sparklink.files.finish`` finishes an output whose query will
not run again.

**Spark Connect.** A Connect client has no JVM, no listener and may not reach the files; the
notes are on the server's machine. The client waits for the query as above
(:func:`install_connect` wraps ``pyspark.sql.connect``'s ``StreamingQuery``) and runs the end
of input on the server through a batch read of the data source ``sparklink.endOfInput``
(:class:`~sparklink.spark.end_of_input_server.EndOfInputDataSource`, registered by
``sparklink.register``): its reader's
``partitions()`` runs in a Python worker of the server's driver JVM, where it runs the noted
action (option ``queryId``) or ``sparklink.files.finish`` of an output (option ``path``, with
the output's ``s3.*`` settings), and returns one row saying what it did.
``SparkSession.stop()`` of a Connect client first stops the session's active queries that
way (:func:`_wrap_connect_session_stop`): otherwise the server stops a released session's
queries itself, and no end of input runs.
"""

from __future__ import annotations

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

from sparklink.connectors import end_of_input_actions
from sparklink.contract import resolve
from sparklink.sink.lease import DriverIdentity
from sparklink.sink.sink import EndOfInput
from sparklink.spark.driver import current_driver, driver_of_session, is_connect

logger = logging.getLogger("sparklink.end_of_input")

DRAIN_TIMEOUT_MS = 30 * 60 * 1000  # a finish that compacts many held files may take minutes
DATA_SOURCE = "sparklink.endOfInput"


def notes_dir() -> Path:
    """Where this machine's notes are (one per query id, for this user)."""
    uid = os.getuid() if hasattr(os, "getuid") else 0
    return Path(tempfile.gettempdir()) / f"sparklink-{uid}" / "end-of-input" / "queries"


def note_end_of_input(query_id: str | None, action: EndOfInput | None) -> None:
    """In the worker that commits a micro-batch (driver's machine), every commit: note the
    query's end-of-input action (written once per query; a cheap existence check after)."""
    if query_id is None or action is None:
        return
    directory = notes_dir()
    note = directory / f"{query_id}.json"
    if note.exists():
        return
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = directory / f".{query_id}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(action.to_json()), encoding="utf-8")
    os.replace(tmp, note)


def _claim(query_id: str) -> tuple[EndOfInput, Path, Path] | None:
    """Take the note of ``query_id`` away (an atomic rename), so that one runner runs it and a
    commit of a later run notes afresh. None: no note."""
    directory = notes_dir()
    note = directory / f"{query_id}.json"
    claimed = directory / f".{query_id}.claimed-{os.getpid()}-{threading.get_ident()}"
    try:
        os.rename(note, claimed)
    except FileNotFoundError:
        return None
    try:
        return EndOfInput.from_json(json.loads(claimed.read_text(encoding="utf-8"))), note, claimed
    except (ValueError, KeyError, TypeError) as exc:
        claimed.unlink(missing_ok=True)
        raise ValueError(f"{note}: the end-of-input note is damaged ({exc}); it was removed: run "
                         "sparklink.files.finish(spark, path) for the query's output") from None


def _put_back(note: Path, claimed: Path) -> None:
    """A failed action: the note again (unless a later run noted meanwhile), so the next end retries."""
    try:
        os.link(claimed, note)
    except FileExistsError:
        pass
    claimed.unlink(missing_ok=True)


def run_end_of_input(query_id: str, driver: DriverIdentity | None,
                     active_queries: Callable[[], frozenset[str]] = frozenset) -> str | None:
    """Driver's machine: run the action noted for ``query_id`` (None: no note), then remove the
    note. An error is raised to the caller with the note kept (the next end retries).
    ``active_queries`` gives the session's active query ids (asked under the output's lock: a
    query restarted meanwhile owns its output again, and the action is refused)."""
    claim = _claim(query_id)
    if claim is None:
        return None
    action, note, claimed = claim
    # the actions a note may name are those the connectors declare (never code named by the note)
    actions = end_of_input_actions()
    try:
        if action.kind not in actions:
            raise ValueError(f"{note}: end-of-input action '{action.kind}' is not one of {', '.join(sorted(actions))}")
        outcome = resolve(actions[action.kind])(action.target, driver=current_driver(),
                                                session_drivers=frozenset({driver} if driver else ()),
                                                active_queries=active_queries)
    except BaseException:
        _put_back(note, claimed)
        raise
    claimed.unlink(missing_ok=True)
    return f"{action.target}: {outcome}"


class _Session:
    """One classic session with the end of input installed (driver process)."""

    def __init__(self, spark: Any, driver: DriverIdentity):
        self.spark = spark
        self.driver = driver

    def active_queries(self) -> frozenset[str]:
        return frozenset(str(query.id) for query in self.spark.streams.active)

    def end_query(self, query_id: str) -> str | None:
        """Run the end of input of ``query_id`` (once, whoever asks first: the caller or the
        listener); record and return what it did."""
        with _query_lock(query_id):
            said = run_end_of_input(query_id, self.driver, self.active_queries)
        if said is not None:
            logger.info("end of input of query %s: %s", query_id, said)
            with _lock:
                _done[query_id] = said
        return said


class EndOfInputListener(StreamingQueryListener):
    """Runs a sink's end of input when its query terminates without an exception (driver
    process, on Spark's listener thread, once per query end), for a query nobody waits on."""

    def __init__(self, session: _Session):
        self.session = session

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
            self.session.end_query(str(event.id))
        except Exception as exc:  # noqa: BLE001 - an event handler must not die: the log says what to run
            logger.warning("query %s ended, but finishing its output failed: %s; committed files are safe; "
                           "run sparklink.files.finish(spark, path) once nothing writes the output", event.id, exc)


_sessions: dict[int, _Session | None] = {}  # JVM session hash -> installed (None: install(enabled=False))
_done: dict[str, str] = {}  # query id -> what its end of input did (this process)
_lock = threading.Lock()
_query_locks: dict[str, threading.Lock] = {}


def _query_lock(query_id: str) -> threading.Lock:
    with _lock:
        return _query_locks.setdefault(query_id, threading.Lock())


def _session_of_query(query: Any) -> _Session | None:
    """The installed session a classic ``StreamingQuery`` belongs to (None: none installed)."""
    with _lock:
        if not any(_sessions.values()):
            return None
    key = query._jsq.sparkSession().hashCode()
    with _lock:
        return _sessions.get(key)


def _end_of_classic_query(query: Any) -> None:
    """After a classic query terminated without an exception: run its end of input now."""
    session = _session_of_query(query)
    if session is not None:
        session.end_query(str(query.id))


def _wrap(cls: Any, end: Callable[[Any], None]) -> None:
    """Wrap ``awaitTermination``, ``stop`` and ``processAllAvailable`` of the StreamingQuery
    class ``cls`` (once) so that a query that has terminated without an exception runs
    ``end(query)`` before they return."""
    if getattr(cls, "_sparklink_end_of_input", False):
        return
    await_termination, stop, process_all = cls.awaitTermination, cls.stop, cls.processAllAvailable

    def awaitTermination(self: Any, timeout: Any = None) -> Any:  # noqa: N802 - PySpark's name
        terminated = await_termination(self, timeout)  # raises the query's exception, if it failed
        if timeout is None or terminated:
            end(self)
        return terminated

    def stop_(self: Any) -> None:
        stop(self)
        if self.exception() is None:
            end(self)

    def processAllAvailable(self: Any) -> None:  # noqa: N802 - PySpark's name
        process_all(self)
        if not self.isActive and self.exception() is None:  # an availableNow query that ended
            end(self)

    wrappers: dict[str, Any] = {"awaitTermination": awaitTermination, "stop": stop_,
                                "processAllAvailable": processAllAvailable}
    for name, function in wrappers.items():
        original = getattr(cls, name)
        function.__name__, function.__doc__ = name, original.__doc__
        function.__wrapped__ = original
        setattr(cls, name, function)
    cls._sparklink_end_of_input = True


def _wrap_session_stop(cls: Any) -> None:
    """``SparkSession.stop()`` (classic): stop the active queries of installed sessions first,
    each running its end of input, then stop as PySpark does; an end of input that failed is
    raised after the stop."""
    if getattr(cls, "_sparklink_end_of_input", False):
        return
    original = cls.stop

    def stop(self: Any) -> None:
        with _lock:
            sessions = [s for s in _sessions.values() if s is not None]
        _stop_queries_then(original, self, [query for session in sessions
                                            for query in _active_queries(session.spark)])

    stop.__name__, stop.__doc__ = "stop", original.__doc__
    stop.__wrapped__ = original  # type: ignore[attr-defined]
    cls.stop = stop
    cls._sparklink_end_of_input = True


def _active_queries(spark: Any) -> list[Any]:
    """The active queries of ``spark``; none for a session already stopped (or one the Connect
    server lost)."""
    try:
        return list(spark.streams.active)
    except Exception as exc:  # noqa: BLE001 - a stopped session has no query to stop
        logger.debug("no active queries to stop: %s", exc)
        return []


def _stop_queries_then(original: Callable[[Any], None], session: Any, queries: list[Any],
                       after: Callable[[], None] | None = None) -> None:
    """Stop ``queries`` (each wrapped stop runs its end of input), then ``original(session)``
    and ``after()``; the first end of input that failed is raised once the session stopped."""
    failure: BaseException | None = None
    for query in queries:
        try:
            query.stop()  # wrapped: runs its end of input
        except Exception as exc:  # noqa: BLE001 - stop the session still; raised below
            logger.warning("spark.stop(): the end of input of query %s failed: %s", query.id, exc)
            failure = failure or exc
    original(session)
    if after is not None:
        after()
    if failure is not None:
        raise failure


def _wait_for_listener_bus(context: Any) -> None:
    """Until Spark's listener bus of ``context`` (a SparkContext) has handled every event posted
    so far, ours included."""
    context._jsc.sc().listenerBus().waitUntilEmpty(DRAIN_TIMEOUT_MS)


def await_end_of_input(spark: Any, query_ids: list[str]) -> dict[str, str]:
    """Driver process, after queries of ``spark`` terminated: run or wait for their end of
    input, and say what each did (query id -> summary; queries whose end of input had nothing
    to do are absent)."""
    with _lock:
        session = _sessions.get(spark._jsparkSession.hashCode())
    if session is not None:
        for query_id in query_ids:
            session.end_query(query_id)
    _wait_for_listener_bus(spark.sparkContext)
    with _lock:
        return {query_id: _done[query_id] for query_id in query_ids if query_id in _done}


def _drain_listener_bus() -> None:
    """At interpreter exit (before thread pools and S3 clients go): wait until Spark's listener
    bus delivered every event (our handler ran)."""
    from pyspark import SparkContext

    context = SparkContext._active_spark_context
    if context is None:
        return  # stopped: SparkContext.stop() drained the bus already
    try:
        _wait_for_listener_bus(context)
    except Exception as exc:  # noqa: BLE001 - at exit: say what was not waited for, never hide it
        logger.warning("at exit, Spark's listener events were not all handled (%s): an output whose query "
                       "just ended may keep held files hidden; run sparklink.files.finish(spark, path)", exc)


def _register_exit_barrier() -> None:
    """Run :func:`_drain_listener_bus` at interpreter exit, before ``concurrent.futures``
    refuses new work: both are hooks of :func:`threading._register_atexit`, which runs them in
    reverse order of registration, so ``concurrent.futures.thread`` is imported (its hook
    registered) first. Those hooks run before :mod:`atexit`'s (pyarrow's S3 finalizer, py4j's
    gateway)."""
    import concurrent.futures.thread  # noqa: F401 - registers its exit hook before ours

    threading._register_atexit(_drain_listener_bus)  # type: ignore[attr-defined]


def install(spark: Any, *, enabled: bool = True) -> None:
    """Driver side, from ``sparklink.register(spark)``: the wrapped query methods and the exit
    barrier once per process, the listener once per session; the first call for a session
    decides (``enabled=False``: none for this session). A Spark Connect session goes to
    :func:`install_connect`."""
    driver = driver_of_session(spark)
    if driver is None:
        if is_connect(spark):
            install_connect(spark, enabled=enabled)
        return
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

    with _lock:
        key = spark._jsparkSession.hashCode()
        if key in _sessions:
            return
        if not enabled:
            _sessions[key] = None
            return
        first = not any(_sessions.values())
        session = _Session(spark, driver)
        _sessions[key] = session
    if first:
        _register_exit_barrier()
    _wrap(StreamingQuery, _end_of_classic_query)
    _wrap_session_stop(SparkSession)
    spark.streams.addListener(EndOfInputListener(session))


@contextmanager
def listening(spark: Any) -> Iterator[None]:
    """The end of input on ``spark`` for the duration of the block, whatever :func:`install`
    decided for the session (tests of the end of input in a shared session)."""
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

    driver = driver_of_session(spark)
    assert driver is not None, "listening() serves classic sessions"
    key = spark._jsparkSession.hashCode()
    session = _Session(spark, driver)
    listener = EndOfInputListener(session)
    with _lock:
        before = _sessions.get(key, None)
        had = key in _sessions
        _sessions[key] = session
    _wrap(StreamingQuery, _end_of_classic_query)
    _wrap_session_stop(SparkSession)
    spark.streams.addListener(listener)
    try:
        yield
    finally:
        _wait_for_listener_bus(spark.sparkContext)
        spark.streams.removeListener(listener)
        with _lock:
            if had:
                _sessions[key] = before
            else:
                _sessions.pop(key, None)


# ---------------------------------------------------------------------------------- Spark Connect

_connect_sessions: dict[int, bool] = {}  # id(session) -> enabled (removed when the session stops)


def install_connect(spark: Any, *, enabled: bool = True) -> None:
    """Client side of a Spark Connect session: wrap ``pyspark.sql.connect``'s StreamingQuery so
    that waiting for a query that ended runs its end of input on the server (see
    :func:`run_on_server`). ``sparklink.register(spark)`` must have registered the data source
    ``sparklink.endOfInput`` with the server."""
    from pyspark.sql.connect.session import SparkSession as ConnectSession
    from pyspark.sql.connect.streaming.query import StreamingQuery as ConnectStreamingQuery

    with _lock:
        _connect_sessions.setdefault(id(spark), enabled)
    _wrap(ConnectStreamingQuery, _end_of_connect_query)
    _wrap_connect_session_stop(ConnectSession)


def _wrap_connect_session_stop(cls: Any) -> None:
    """``SparkSession.stop()`` of a Spark Connect client: stop the session's active queries
    first, each running its end of input on the server (the wrapped ``StreamingQuery.stop``),
    then release the session as PySpark does; an end of input that failed is raised after.
    Without it the server stops the released session's queries itself, and nothing runs their
    end of input: a file sink's held and carried files would stay hidden."""
    if getattr(cls, "_sparklink_end_of_input", False):
        return
    original = cls.stop

    def stop(self: Any) -> None:
        with _lock:
            enabled = _connect_sessions.get(id(self), False)

        def forget() -> None:
            with _lock:
                _connect_sessions.pop(id(self), None)

        queries = _active_queries(self) if enabled and not self.is_stopped else []
        _stop_queries_then(original, self, queries, after=forget)

    stop.__name__, stop.__doc__ = "stop", original.__doc__
    stop.__wrapped__ = original  # type: ignore[attr-defined]
    cls.stop = stop
    cls._sparklink_end_of_input = True


def connect_installed(spark: Any) -> bool:
    """Whether :func:`install_connect` ran for the Spark Connect session ``spark``."""
    with _lock:
        return id(spark) in _connect_sessions


def _end_of_connect_query(query: Any) -> None:
    session = query._session
    with _lock:
        enabled = _connect_sessions.get(id(session), False)
    if enabled:
        with _query_lock(str(query.id)):
            run_on_server(session, {"queryId": str(query.id)})


def run_on_server(spark: Any, options: dict[str, str]) -> list[dict[str, Any]]:
    """Any session kind (made for Spark Connect clients): run an end of input (``queryId``) or a
    finish (``path`` and the output's ``s3.*`` settings) in a Python worker of the server's
    driver JVM, through a batch read of ``sparklink.endOfInput``; returns its rows (target,
    summary and, for a finish, the FinishResult as JSON). Its errors are raised here."""
    active = ",".join(sorted(str(query.id) for query in spark.streams.active))
    rows = spark.read.format(DATA_SOURCE).options(**options, activeQueries=active).load().collect()
    return [row.asDict() for row in rows]
