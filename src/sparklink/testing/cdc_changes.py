"""A change maker for the CDC pipelines (the kill test in tests/postgres/test_cdc_stream.py and
``make chaos``): a process of its own that inserts, updates and deletes rows of tables
``(id int PRIMARY KEY, v text)`` with keys 1 to 800 (single statements and three-statement
transactions; a table never outgrows 800 rows, so a snapshot by key ends) until its stop file
exists, then prints how many rows it changed (committed changes: what the log must deliver).

    python -m sparklink.testing.cdc_changes '<dsn>' '<stop file>' public.a public.b
"""

from __future__ import annotations

import os
import random
import sys
import time

import psycopg


def run(dsn: str, stop: str, tables: list[str], *, seed: int = 7, pause: float = 0.05) -> int:
    """Make changes until ``stop`` exists; returns the number of changed rows committed."""
    rng = random.Random(seed)
    changes = 0
    with psycopg.connect(dsn, autocommit=True) as conn:
        while not os.path.exists(stop):
            table = rng.choice(tables)
            with conn.transaction():
                for _ in range(rng.choice((1, 1, 1, 3))):
                    kind, key = rng.random(), rng.randint(1, 800)
                    if kind < 0.35:  # an existing key is no change
                        cursor = conn.execute(f"INSERT INTO {table} VALUES (%s, %s) ON CONFLICT (id) DO NOTHING",
                                              [key, f"i{changes}"])
                    elif kind < 0.8:
                        cursor = conn.execute(f"UPDATE {table} SET v = %s WHERE id = %s", [f"u{changes}", key])
                    else:
                        cursor = conn.execute(f"DELETE FROM {table} WHERE id = %s", [key])
                    changes += max(cursor.rowcount, 0)
            time.sleep(pause)
    return changes


if __name__ == "__main__":
    print(run(sys.argv[1], sys.argv[2], sys.argv[3:]))
