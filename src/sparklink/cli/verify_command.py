"""``sparklink verify PATH [--key COL]``: check a file sink output's invariants.

Checks (DESIGN.md section 4): the sink's metadata is consistent (the same findings a query
start acts on, see :mod:`sparklink.files.sink.consistency`: each reported with what the next
start does about it); every commit is finished; every file the commit log finished exists and
reads completely and holds the bytes its commit recorded (where the state or job entry still
records them); no visible file is outside the commit log; no orphaned hidden part file is left
(on S3 also no tail object and no incomplete multipart upload that no commit names); with
``--key``, no key appears twice among visible records. ``PATH`` is a local directory or an
``s3://`` / ``s3a://`` URI (S3 settings from the AWS environment and config files). Exit status 0 when all hold,
1 with one line per violation otherwise, 2 when the path is not a sink output or a metadata
file it needs cannot be read. Damaged files are reported, never a traceback.
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from collections.abc import Mapping
from pathlib import Path

from sparklink.cli.sink_output import SinkOutput, format_of, read_table
from sparklink.errors import DataError, SparklinkError
from sparklink.files.sink.layout import OutputLayout
from sparklink.files.sink.output_schema import TYPED_FORMATS, file_schema_problem, recorded_arrow_schema
from sparklink.files.sink.recovery import recorded_retention
from sparklink.files.sink.spark_log import METADATA_DIR, SparkLog
from sparklink.storage.base import FileStorage


def add_parser(commands) -> None:
    parser = commands.add_parser(
        "verify", help="check a file sink's output for exactly-once violations",
        description="Check a sparklink file sink output: finished commits, every committed file present and "
                    "readable, no visible file outside the commit log, no leftover orphans, and (with --key) no "
                    "duplicate keys. Exit status 1 on a violation. Run it on an output whose query is stopped: "
                    "a running query has attempts in flight.")
    parser.add_argument("path", help="the sink's output: a directory or s3://bucket/prefix (its 'path' option; "
                                     "S3 settings from AWS_ENDPOINT_URL_S3, AWS_ACCESS_KEY_ID, ... or ~/.aws)")
    parser.add_argument("--key", help="a column whose values must be unique across all visible records")
    parser.add_argument("--format", choices=["text", "json", "csv", "parquet", "avro", "orc"],
                        help="the files' format (default: from each file's suffix)")
    parser.set_defaults(handler=run)


def find_violations(path: str | Path, *, key: str | None = None, fmt: str | None = None,
                    options: Mapping[str, str] | None = None) -> tuple[list[str], dict]:
    """The list of violations (empty when the output is sound) and a few counts. ``path`` is a
    local directory or an S3 URI (``options``: ``s3.*`` settings; default: the AWS environment)."""
    output = SinkOutput.load(path, options=options)
    store = output.store
    scan = store.scan()
    violations = [f"metadata: {finding}" for finding in scan.findings(base_required=scan.carries_or_holds())]
    violations += [f"commit {key_} is not finished (restart the query to roll it forward)"
                   for key_ in output.unfinished_commits]
    manifest = store.manifest()
    committed, expired = manifest.finished_files(), manifest.expired_files()
    visible = output.finished.sizes
    for missing in sorted(committed - set(visible)):
        violations.append(f"committed file {missing} is missing")
    for name, size in sorted(manifest.recorded_sizes().items()):
        if name in visible and visible[name] != size:
            violations.append(f"committed file {name} holds {visible[name]} bytes, not the {size} its commit recorded")
    for stray in sorted(set(visible) - committed - expired):
        if not scan.may_have_finished(stray):
            violations.append(f"visible file {stray} is not in the commit log")
    violations.extend(spark_log_violations(store.storage, committed, expired, visible))
    for orphan in output.orphan_parts:
        violations.append(f"orphaned part file {orphan} is left over from a failed attempt")
    for tail in output.orphan_tails:
        violations.append(f"tail object {tail} of a carried file is left over: no commit names it")
    for upload_key, upload_id in output.orphan_uploads:
        violations.append(f"incomplete multipart upload {store.storage.uri(upload_key)} (upload id {upload_id}) is "
                          "left over: no commit names it (the query's next commit aborts it; a bucket lifecycle "
                          "rule aborts it if the query never runs again)")
    keys: Counter = Counter()
    rows = 0
    recorded = recorded_arrow_schema(store.storage)
    for relative in sorted(visible):
        file_format = format_of(relative, fmt)
        try:
            table = read_table(store, relative, file_format)
        except DataError as exc:
            violations.append(f"unreadable file: {exc}")
            continue
        rows += table.num_rows
        if recorded is not None and file_format in TYPED_FORMATS:
            problem = file_schema_problem(relative, table.schema, recorded)
            if problem:
                violations.append(problem)
        if key:
            if key not in table.column_names:
                violations.append(f"file {relative} has no column '{key}'")
                continue
            keys.update(table.column(key).to_pylist())
    duplicates = {k: n for k, n in keys.items() if n > 1}
    for value, count in sorted(duplicates.items(), key=lambda item: str(item[0]))[:20]:
        violations.append(f"key {key}={value!r} appears {count} times")
    if len(duplicates) > 20:
        violations.append(f"... and {len(duplicates) - 20} more duplicate keys")
    return violations, {"files": len(visible), "rows": rows}


def spark_log_violations(storage: FileStorage, committed: set[str], expired: set[str],
                         visible: Mapping[str, int]) -> list[str]:
    """Spark's log (``_spark_metadata``, when present) names files that exist, and every live
    committed file that is not past the retention (local disk and S3, through the storage)."""
    log = SparkLog(storage)
    if not log.exists():
        return []
    try:
        named = {entry.path: log.relative(entry.path) for entry in log.view()}
    except DataError as exc:
        return [f"{METADATA_DIR} does not read: {exc}"]
    outside = sorted(uri for uri, relative in named.items() if relative is None)
    in_log = {relative for relative in named.values() if relative is not None}
    if outside:
        return [f"{METADATA_DIR} names {len(outside)} file(s) outside {storage.uri('')}, e.g. {outside[0]}: was the "
                "output moved or copied? Spark's log holds absolute paths"]
    violations = [f"{METADATA_DIR} names {name}, which is missing" for name in sorted(in_log - set(visible))]
    retention = recorded_retention(OutputLayout(storage).meta)
    now = time.time()
    for name in sorted(committed - in_log - expired):
        info = storage.info(name) if retention is not None else None
        if retention is not None and info is not None and now - info.modified_at > retention:
            continue  # left Spark's log at a compact batch, not yet folded out of sparklink's manifest
        violations.append(f"committed file {name} is not in {METADATA_DIR} (Spark's readers do not see it)")
    return violations


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
