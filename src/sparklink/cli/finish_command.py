"""``sparklink finish PATH``: publish what a stopped file sink output holds hidden (driver side,
no Spark session): its held and carried files and an interrupted finish, as
``sparklink.files.finish(None, path)`` does. The command ``sparklink verify`` and ``sparklink
inspect`` name when they find committed rows hidden."""

from __future__ import annotations

import argparse

from sparklink.errors import SparklinkError


def add_parser(commands) -> None:
    parser = commands.add_parser(
        "finish", help="publish a stopped file sink output's held and carried files",
        description="Make every row a stopped sparklink file sink query committed visible: files held for "
                    "compaction are compacted, carried files are finished at their committed length, an "
                    "interrupted finish is completed. Refused while a query holds the output's lease.")
    parser.add_argument("path", help="the sink's output: a directory or s3://bucket/prefix (its 'path' option; "
                                     "S3 settings from AWS_ENDPOINT_URL_S3, AWS_ACCESS_KEY_ID, ... or ~/.aws)")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from sparklink.spark.finish import finish

    try:
        result = finish(None, args.path)
    except SparklinkError as exc:
        print(f"sparklink finish: {exc}")
        return 2
    print(f"sparklink finish: {result.path}: {result.summary()}")
    return 0
