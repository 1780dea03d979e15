"""Run every benchmark in ``bench/`` one after the other (``make bench``).

Each script compares sparklink with Spark's own connector in the same run and prints its own
ratios; this runner only starts them in turn with the current interpreter and stops at the
first one that fails. Arguments are not forwarded: run a script directly to change its options.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCHMARKS = ["bench_file_sink.py", "bench_file_source.py", "bench_postgres.py", "bench_kafka.py", "bench_s3.py",
              "bench_s3_parts.py", "bench_file_source_s3.py"]


def main() -> int:
    here = Path(__file__).resolve().parent
    for name in BENCHMARKS:
        print(f"\n=== {name} ===", flush=True)
        code = subprocess.call([sys.executable, str(here / name)])
        if code != 0:
            print(f"{name} failed with exit status {code}", file=sys.stderr)
            return code
    return 0


if __name__ == "__main__":
    sys.exit(main())
