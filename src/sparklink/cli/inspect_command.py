"""``sparklink inspect PATH``: what a file sink's output holds (no Spark needed; driver side).

``PATH`` is a local directory or an ``s3://`` / ``s3a://`` URI (S3 settings from the AWS
environment and config files). What is printed names the store's endpoint and where its
credentials come from, never a secret. Exit status 1 when committed rows are hidden from
readers (held or carried files, an interrupted finish: the same finding as ``sparklink
verify``, naming ``sparklink finish PATH``), 2 when ``PATH`` does not exist or is not a sink
output."""

from __future__ import annotations

import argparse
import json
import time

from sparklink.errors import SparklinkError
from sparklink.files.sink.inspection import SinkOutput


def add_parser(commands) -> None:
    parser = commands.add_parser(
        "inspect", help="summarise a file sink's output directory",
        description="Summarise a sparklink file sink's output (a directory or an S3 prefix): committed batches, "
                    "buckets, finished / pending / in-progress / orphaned part files with their sizes (on S3 "
                    "incomplete multipart uploads included), and the last commit time. Exit status 1 when committed "
                    "rows are hidden from readers (files held for compaction or carried, an interrupted finish), "
                    "with the command that publishes them; 2 when PATH is not a sink output.")
    parser.add_argument("path", help="the sink's output: a directory or s3://bucket/prefix (its 'path' option; "
                                     "S3 settings from AWS_ENDPOINT_URL_S3, AWS_ACCESS_KEY_ID, ... or ~/.aws)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    parser.set_defaults(handler=run)


def _size(size: int) -> str:
    n = float(size)
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def run(args: argparse.Namespace) -> int:
    try:
        output = SinkOutput.load(args.path)
    except SparklinkError as exc:
        print(f"sparklink inspect: {exc}")
        return 2
    hidden = output.hidden_committed()
    if args.json:
        print(json.dumps(output.to_json(), indent=2, sort_keys=True))
        return 1 if hidden else 0
    summary = output.to_json()
    last = (time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(output.last_commit_time))
            if output.last_commit_time else "never")
    batches = (f"{summary['committedBatches']} (batch {summary['firstBatch']} .. {summary['lastBatch']})"
               if output.committed_batches else "0")
    print(f"sink output        {output.store.describe()}")
    print(f"committed batches  {batches}; batch jobs: {output.job_commits}")
    print(f"last commit        {last}")
    if output.unfinished_commits:
        print(f"unfinished commits {', '.join(output.unfinished_commits)} (rolled forward when the query restarts)")
    print(f"buckets            {len(output.buckets)}")
    for label, group in (("finished", output.finished), ("in-progress", output.in_progress),
                         ("pending", output.pending), ("orphans", output.orphans)):
        print(f"{label:<18} {group.count:>8} files  {_size(group.bytes):>10}")
    if output.held.count:
        print(f"{'of which held':<18} {output.held.count:>8} files  {_size(output.held.bytes):>10}")
    if output.finish_pending:
        print("finish             pending (an interrupted sparklink.files.finish)")
    if hidden:
        print(f"finding            {hidden}")
        return 1
    return 0
