"""``sparklink run PIPELINE.toml``: run a declarative pipeline (driver side).

Sources become temporary views, the SQL transform reads them, and every sink gets its own
streaming query with its own checkpoint. ``--master`` picks the cluster (default: the file's
``spark.master``, else ``local[*]``); on a non-local master, sparklink ships itself to the
executors as a ``--py-files`` zip.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from sparklink.cli.pipeline_config import PipelineSpec, load_pipeline
from sparklink.errors import SparklinkError


def add_parser(commands) -> None:
    parser = commands.add_parser(
        "run", help="run a declarative pipeline (TOML)",
        description="Run the streaming pipeline described by a TOML file: sources, an SQL transform, sinks, "
                    "checkpoints and a trigger. See docs/cli.md for the file format.")
    parser.add_argument("pipeline", help="the pipeline file (TOML)")
    parser.add_argument("--master", help="Spark master URL, e.g. spark://host:7077 (default: the file's "
                                         "spark.master, else local[*])")
    parser.add_argument("--duration", type=float,
                        help="with a processingTime trigger: stop after this many seconds (default: run until "
                             "interrupted)")
    parser.add_argument("--check", action="store_true", help="only check the file and print the plan")
    parser.set_defaults(handler=run)


def _spark_for(spec: PipelineSpec, master: str):
    from sparklink.testing import spark_session

    conf = dict(spec.spark_conf)
    if not master.startswith("local"):
        from sparklink.spark.py_files import build_py_files_zip

        shipped = build_py_files_zip(Path(tempfile.mkdtemp(prefix="sparklink-ship-")) / "sparklink.zip")
        conf.setdefault("spark.submit.pyFiles", str(shipped))
    return spark_session(master=master, app_name=spec.app_name, extra=conf)


def start_pipeline(spark, spec: PipelineSpec) -> list:
    """Start one streaming query per sink; returns the queries."""
    for source in spec.sources:
        reader = spark.readStream.format(source.format).options(**source.options)
        if source.schema:
            reader = reader.schema(source.schema)
        reader.load().createOrReplaceTempView(source.name)
    frame = spark.sql(spec.sql) if spec.sql else spark.table(spec.sources[0].name)
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


def run(args: argparse.Namespace) -> int:
    try:
        spec = load_pipeline(args.pipeline)
    except SparklinkError as exc:
        print(f"sparklink run: {exc}")
        return 2
    master = args.master or spec.master or "local[*]"
    plan = (f"pipeline {spec.path.name}: sources {', '.join(f'{s.name} ({s.format})' for s in spec.sources)} -> "
            f"{'SQL transform' if spec.sql else 'no transform'} -> sinks "
            f"{', '.join(f'{s.name} ({s.format})' for s in spec.sinks)}; trigger {spec.trigger_mode}"
            f"{' ' + spec.trigger_interval if spec.trigger_interval else ''}; master {master}")
    print(plan)
    if args.check:
        return 0
    spark = _spark_for(spec, master)
    try:
        queries = start_pipeline(spark, spec)
        started = time.time()
        while any(q.isActive for q in queries):
            for query in queries:
                if query.exception() is not None:
                    raise query.exception()
            if args.duration is not None and time.time() - started >= args.duration:
                break
            time.sleep(0.5)
        for query in queries:
            if query.isActive:
                query.stop()
            if query.exception() is not None:
                raise query.exception()
        rows = {q.name: sum(p["numInputRows"] for p in q.recentProgress) for q in queries}
        print("done: " + ", ".join(f"{name}: {count} rows" for name, count in rows.items()))
        return 0
    except KeyboardInterrupt:
        print("interrupted; the queries stop and resume from their checkpoints on the next run")
        return 130
    finally:
        spark.stop()
