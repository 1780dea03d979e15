"""Run every benchmark in ``bench/`` one after the other (``make bench``).

Each script compares sparklink with Spark's own connector in the same run and prints its own
ratios; this runner only starts them in turn with the current interpreter and stops at the
first one that fails. ``--quick`` is forwarded to the scripts that have a smoke mode
(``QUICK``) and the others are skipped, so the whole set can be smoke-run in minutes; no other
argument is forwarded: run a script directly to change its options.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCHMARKS = ["bench_file_sink.py", "bench_file_source.py", "bench_postgres.py", "bench_kafka.py", "bench_s3.py",
              "bench_s3_parts.py", "bench_file_source_s3.py", "bench_cassandra.py", "bench_delta.py",
              "bench_iceberg.py", "bench_changelog.py", "bench_cdc.py"]
QUICK = {"bench_file_sink.py", "bench_file_source.py"}  # the scripts with a --quick smoke mode


def main() -> int:
    quick = sys.argv[1:] == ["--quick"]
    if sys.argv[1:] and not quick:
        print(f"usage: {sys.argv[0]} [--quick]", file=sys.stderr)
        return 2
    here = Path(__file__).resolve().parent
    for name in BENCHMARKS:
        if quick and name not in QUICK:
            continue
        print(f"\n=== {name} ===", flush=True)
        code = subprocess.call([sys.executable, str(here / name), *(["--quick"] if quick else [])])
        if code != 0:
            print(f"{name} failed with exit status {code}", file=sys.stderr)
            return code
    return 0


if __name__ == "__main__":
    sys.exit(main())
