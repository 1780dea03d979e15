"""Run every benchmark in ``bench/`` one after the other (``make bench``).

Each script compares sparklink with Spark's own connector in the same run and prints its own
ratios; this runner only starts them in turn with the current interpreter and stops at the
first one that fails. ``--quick`` is forwarded to the scripts that have a smoke mode
(``QUICK``) and the others are skipped, so the whole set can be smoke-run in minutes; no other
argument is forwarded: run a script directly to change its options. ``FIRST_RUN_ARGUMENTS`` gives
a script's own arguments (the Kafka cases best of 2); ``SECOND_RUNS`` names the
scripts run a second time with other arguments (the Delta and Iceberg scripts on the ``users``
shape).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCHMARKS = ["bench_file_sink.py", "bench_file_source.py", "bench_postgres.py", "bench_kafka.py", "bench_s3.py",
              "bench_s3_parts.py", "bench_file_source_s3.py", "bench_cassandra.py", "bench_delta.py",
              "bench_iceberg.py", "bench_changelog.py", "bench_cdc.py"]
QUICK = {"bench_file_sink.py", "bench_file_source.py"}  # the scripts with a --quick smoke mode
# scripts run once more with these arguments: the table formats on the second data shape (their
# default run is `simple`; the file, S3 and Kafka scripts run both shapes themselves)
SECOND_RUNS = {"bench_delta.py": ["--shape", "users", "--half", "both"], "bench_iceberg.py": ["--shape", "users"]}
# arguments of a script's first run: the Kafka cases are timed twice (one run moved by a fifth)
FIRST_RUN_ARGUMENTS = {"bench_kafka.py": ["--repeat", "2"]}


def main() -> int:
    quick = sys.argv[1:] == ["--quick"]
    if sys.argv[1:] and not quick:
        print(f"usage: {sys.argv[0]} [--quick]", file=sys.stderr)
        return 2
    here = Path(__file__).resolve().parent
    for name in BENCHMARKS:
        if quick and name not in QUICK:
            continue
        runs = [["--quick"] if quick else FIRST_RUN_ARGUMENTS.get(name, [])] + (
            [SECOND_RUNS[name]] if name in SECOND_RUNS and not quick else [])
        for arguments in runs:
            print(f"\n=== {' '.join([name, *arguments])} ===", flush=True)
            code = subprocess.call([sys.executable, str(here / name), *arguments])
            if code != 0:
                print(f"{name} {' '.join(arguments)} failed with exit status {code}", file=sys.stderr)
                return code
    return 0


if __name__ == "__main__":
    sys.exit(main())
