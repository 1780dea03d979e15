"""``sparklink verify PATH [--key COL]``: check a file sink output's invariants (the checks are
:func:`sparklink.files.sink.inspection.find_violations`'s; this module parses and prints).

Checks (ARCHITECTURE.md, "The file sink's invariants"): the sink's metadata is consistent (the same findings a query
start acts on, see :mod:`sparklink.files.sink.consistency`: each reported with what the next
start does about it); every commit is finished; every file the commit log finished exists and
reads completely and holds the bytes its commit recorded (where the state or job entry still
records them); no visible file is outside the commit log; no orphaned hidden part file is left
(on S3 also no tail object and no incomplete multipart upload that no commit names); no
committed row is hidden from readers (files held for compaction or carried by the last commit,
an interrupted finish: reported with ``sparklink finish PATH``, the command that publishes
them); with
``--key``, no key appears twice among visible records. ``PATH`` is a local directory or an
``s3://`` / ``s3a://`` URI (S3 settings from the AWS environment and config files). Exit status 0 when all hold,
1 with one line per violation otherwise, 2 when the path is not a sink output or a metadata
file it needs cannot be read. Damaged files are reported, never a traceback.
"""

from __future__ import annotations

import argparse

from sparklink.errors import SparklinkError
from sparklink.files.sink.inspection import find_violations
from sparklink.formats.options import FORMATS


def add_parser(commands) -> None:
    parser = commands.add_parser(
        "verify", help="check a file sink's output for exactly-once violations",
        description="Check a sparklink file sink output: finished commits, every committed file present and "
                    "readable, no visible file outside the commit log, no leftover orphans, no committed rows hidden "
                    "(held, carried, an interrupted finish: run 'sparklink finish PATH'), and (with --key) no "
                    "duplicate keys. Exit status 1 on a violation. Run it on an output whose query is stopped: "
                    "a running query has attempts in flight.")
    parser.add_argument("path", help="the sink's output: a directory or s3://bucket/prefix (its 'path' option; "
                                     "S3 settings from AWS_ENDPOINT_URL_S3, AWS_ACCESS_KEY_ID, ... or ~/.aws)")
    parser.add_argument("--key", help="a column whose values must be unique across all visible records")
    parser.add_argument("--format", choices=FORMATS,
                        help="the files' format (default: from each file's suffix)")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    try:
        violations, counts = find_violations(args.path, key=args.key, fmt=args.format)
    except SparklinkError as exc:
        print(f"sparklink verify: {exc}")
        return 2
    if violations:
        print(f"sparklink verify: {len(violations)} violation(s) in {args.path}")
        for violation in violations:
            print(f"  - {violation}")
        return 1
    print(f"sparklink verify: OK ({counts['files']} files, {counts['rows']} rows"
          + (f", no duplicate '{args.key}'" if args.key else "") + ")")
    return 0
