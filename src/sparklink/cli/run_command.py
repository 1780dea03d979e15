"""``sparklink run PIPELINE.toml``: run a declarative pipeline (driver side).

Sources become temporary views, the SQL transform reads them, and every sink gets its own
streaming query with its own checkpoint. ``--master`` picks the cluster (default: the file's
``spark.master``, else ``local[*]``); on a non-local master, sparklink ships itself to the
executors as a ``--py-files`` zip. The session has Spark's defaults plus the file's
``[spark]`` table (:mod:`sparklink.cli.spark_sessions`). ``--remote sc://host:port`` (or
``SPARK_REMOTE``) runs the pipeline on a Spark Connect server instead: the queries run in the
server's driver, and sparklink must be installed in the server's Python (docs/connect.md).

Before any query starts, options, paths and the SQL are checked (:mod:`sparklink.cli.pipeline_check`);
``--check`` stops there. A failure prints its cause in one or two lines (``--verbose``: the
full trace) and exits 1; a malformed pipeline file exits 2.
"""

from __future__ import annotations

import argparse
import re
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from sparklink.cli.pipeline_check import analyse, check_connectors, first_lines
from sparklink.cli.pipeline_config import PipelineError, PipelineSpec, load_pipeline
from sparklink.cli.spark_sessions import build_remote_session, build_session, pipeline_settings, remote_url
from sparklink.errors import SparklinkError

EXIT_FAILED = 1
EXIT_BAD_FILE = 2
EXIT_INTERRUPTED = 130
POLL_SECONDS = 0.5
# "sparklink.errors.ConfigError: option 'x': ..." inside a Python traceback that Spark wraps
_SPARKLINK_ERROR_LINE = re.compile(r"^(?:sparklink\.[\w.]+\.)?(\w+(?:Error|Exception)): (.+)$")


def add_parser(commands) -> None:
    parser = commands.add_parser(
        "run", help="run a declarative pipeline (TOML)",
        description="Run the streaming pipeline described by a TOML file: sources, an SQL transform, sinks, "
                    "checkpoints and a trigger. See docs/cli.md for the file format.")
    parser.add_argument("pipeline", help="the pipeline file (TOML)")
    parser.add_argument("--master", help="Spark master URL, e.g. spark://host:7077 (default: the file's "
                                         "spark.master, else local[*])")
    parser.add_argument("--remote", help="Spark Connect server URL, e.g. sc://host:15002 (default: SPARK_REMOTE, "
                                         "else a classic session); the queries run in that server's driver")
    parser.add_argument("--duration", type=float,
                        help="with a processingTime trigger: stop after this many seconds (default: run until "
                             "interrupted)")
    parser.add_argument("--check", action="store_true",
                        help="check the file, the options, the paths and the SQL (analysis only), print the plan "
                             "and exit; no query starts")
    parser.add_argument("--verbose", action="store_true", help="on failure, print the full trace")
    parser.set_defaults(handler=run)


def session_for(spec: PipelineSpec, master: str, *, verbose: bool = False, remote: str | None = None):
    """The pipeline's SparkSession: Spark's defaults, the file's [spark] table, the master; with
    ``remote``, a Spark Connect client of that server (its runtime settings from the file)."""
    conf = dict(spec.spark_conf)
    if remote is not None:
        return build_remote_session(remote, {"spark.app.name": spec.app_name, **conf})
    if not master.startswith("local"):
        from sparklink.spark.py_files import build_py_files_zip

        shipped = build_py_files_zip(Path(tempfile.mkdtemp(prefix="sparklink-ship-")) / "sparklink.zip")
        conf.setdefault("spark.submit.pyFiles", str(shipped))
    spark = build_session(pipeline_settings(master=master, app_name=spec.app_name, conf=conf))
    if not verbose:  # a classic session's own log (a Connect server logs on its side)
        spark.sparkContext.setLogLevel("OFF")  # the cause is printed by run(); --verbose keeps Spark's log
    return spark


def start_pipeline(spark, spec: PipelineSpec) -> list:
    """Check the pipeline on ``spark`` and start one streaming query per sink; returns the queries."""
    frame = analyse(spark, spec)
    queries = []
    for sink in spec.sinks:
        writer = (frame.writeStream.format(sink.format).queryName(sink.name).options(**sink.options)
                  .option("checkpointLocation", sink.checkpoint))
        if spec.trigger_mode == "availableNow":
            writer = writer.trigger(availableNow=True)
        else:
            writer = writer.trigger(processingTime=spec.trigger_interval)
        queries.append(writer.start())
    return queries


@dataclass
class QueryTally:
    """Rows one query read per source and wrote to its sink, from its progress reports
    (one per micro-batch, each counted once however often it is polled)."""

    name: str
    source_names: list[str]
    read: dict[str, int] = field(default_factory=dict)
    written: int = 0
    written_known: bool = True
    seen: set[int] = field(default_factory=set)

    def add(self, progress_reports: list[dict]) -> None:
        for progress in progress_reports:
            batch = progress["batchId"]
            if batch in self.seen:
                continue
            self.seen.add(batch)
            sources = progress.get("sources", [])
            for index, source in enumerate(sources):
                # Spark lists a query's sources in its plan's order, not the file's: a name is
                # certain only when there is one source; otherwise Spark's description says which
                name = (self.source_names[0] if len(sources) == 1 == len(self.source_names)
                        else f"source {index} ({source.get('description', '?')})")
                self.read[name] = self.read.get(name, 0) + int(source.get("numInputRows", 0))
            output = int(progress.get("sink", {}).get("numOutputRows", -1))
            if output < 0:
                self.written_known = False
            else:
                self.written += output

    def summary(self) -> str:
        read = ", ".join(f"{name} {count}" for name, count in self.read.items()) or "nothing"
        written = f"{self.written} rows" if self.written_known else "unknown rows (the sink reports none)"
        return f"{self.name}: read {read} rows; wrote {written} in {len(self.seen)} micro-batches"


def describe_failure(exc: BaseException) -> str:
    """The cause of a failed run in one or two lines: a sparklink error as raised (also when
    Spark wraps it in a Python traceback of a worker), else the first lines of Spark's message."""
    if isinstance(exc, SparklinkError):
        return str(exc)
    found = None
    for line in str(exc).splitlines():
        match = _SPARKLINK_ERROR_LINE.match(line.strip())
        if match and match.group(1) in _sparklink_error_names():
            found = f"{match.group(1)}: {match.group(2)}"
    return found or first_lines(exc)


def _sparklink_error_names() -> set[str]:
    import sparklink.errors as errors

    names, pending = set(), [errors.SparklinkError]
    while pending:
        cls = pending.pop()
        names.add(cls.__name__)
        pending.extend(cls.__subclasses__())
    return names


def _wait(queries: list, tallies: list[QueryTally], duration: float | None) -> None:
    started = time.time()
    while any(q.isActive for q in queries):
        for query, tally in zip(queries, tallies, strict=False):
            tally.add(query.recentProgress)
            if query.exception() is not None:
                raise query.exception()
        if duration is not None and time.time() - started >= duration:
            break
        time.sleep(POLL_SECONDS)
    for query, tally in zip(queries, tallies, strict=False):
        if query.isActive:
            query.stop()
        tally.add(query.recentProgress)
        if query.exception() is not None:
            raise query.exception()


def report_end_of_input(spark, spec: PipelineSpec, queries: list) -> None:
    """After the queries ended: wait for their end of input (a query that ends without a crash
    makes what it committed visible: the file sink finishes its held and carried files, see
    :mod:`sparklink.spark.end_of_input`) and say what it did, per sink."""
    from sparklink.files import finish
    from sparklink.spark.connect import is_connect_session
    from sparklink.spark.end_of_input import await_end_of_input

    if is_connect_session(spark):
        # the queries ran in the server's driver, and so does their end of input: waiting for a query
        # that ended runs it there (sparklink.register installs it for Connect sessions too)
        for query in queries:
            query.awaitTermination()
        return
    done = await_end_of_input(spark, [str(query.id) for query in queries])
    for sink, query in zip(spec.sinks, queries, strict=False):
        if str(query.id) in done:
            print(f"finished {sink.name}: {done[str(query.id)]}")
        elif sink.format == "sparklink.files":
            # a session without the automatic end of input (sparklink.register(spark, end_of_input=False))
            result = finish(spark, sink.options["path"])
            if result.files:
                print(f"finished {sink.name}: {result.path}: {result.summary()}")


def run(args: argparse.Namespace, spark=None) -> int:
    """The ``run`` sub-command. ``spark``: a session to use (and not stop), else one is built."""
    try:
        spec = load_pipeline(args.pipeline)
    except PipelineError as exc:
        print(f"sparklink run: {exc}")
        return EXIT_BAD_FILE
    try:
        remote = remote_url(getattr(args, "remote", None))
    except SparklinkError as exc:
        print(f"sparklink run: {exc}")
        return EXIT_BAD_FILE
    if remote is not None and args.master:
        print("sparklink run: --master and --remote exclude each other (the Connect server has its own master)")
        return EXIT_BAD_FILE
    master = args.master or spec.master or "local[*]"
    plan = (f"pipeline {spec.path.name}: sources {', '.join(f'{s.name} ({s.format})' for s in spec.sources)} -> "
            f"{'SQL transform' if spec.sql else 'no transform'} -> sinks "
            f"{', '.join(f'{s.name} ({s.format})' for s in spec.sinks)}; trigger {spec.trigger_mode}"
            f"{' ' + spec.trigger_interval if spec.trigger_interval else ''}; "
            f"{'Spark Connect server ' + remote if remote else 'master ' + master}")
    print(plan, flush=True)
    if spark is None and remote is None:
        from pyspark.sql import SparkSession

        spark = SparkSession.getActiveSession()  # called in-process next to a running session: share it
    own_session = spark is None
    try:
        check_connectors(spec, check_paths=remote is None)  # under Connect the paths are the server's
        if own_session:
            spark = session_for(spec, master, verbose=args.verbose, remote=remote)
        if args.check:
            analyse(spark, spec)
            print("check: options, paths and SQL are valid (no query was started)")
            return 0
        queries = start_pipeline(spark, spec)
        tallies = [QueryTally(name=sink.name, source_names=[s.name for s in spec.sources]) for sink in spec.sinks]
        _wait(queries, tallies, args.duration)
        print("done: " + "; ".join(t.summary() for t in tallies))
        report_end_of_input(spark, spec, queries)
        return 0
    except KeyboardInterrupt:
        print("interrupted; the queries stop and resume from their checkpoints on the next run")
        return EXIT_INTERRUPTED
    except Exception as exc:  # noqa: BLE001 - every failure ends in a one-line cause and exit 1
        print(f"sparklink run failed: {describe_failure(exc)}")
        if args.verbose:
            traceback.print_exc()
        else:
            print("(run again with --verbose for the full trace)")
        return EXIT_FAILED
    finally:
        if own_session and spark is not None:
            spark.stop()
