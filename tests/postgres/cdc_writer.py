"""The CDC kill test's and ``make chaos``'s change maker: a process of its own that inserts,
updates and deletes rows of the given tables (single statements and multi-statement
transactions) until its stop file exists; it counts the statements it committed on stdout at
the end. ``python -m tests.postgres.cdc_writer '<dsn>' '<stop file>' table...``"""

from __future__ import annotations

import os
import random
import sys
import time

import psycopg


def run(dsn: str, stop: str, tables: list[str], *, seed: int = 7) -> int:
    rng = random.Random(seed)
    changes = 0
    with psycopg.connect(dsn, autocommit=True) as conn:
        next_id = 1_000_000
        while not os.path.exists(stop):
            table = rng.choice(tables)
            with conn.transaction():
                for _ in range(rng.choice((1, 1, 1, 3))):
                    kind = rng.random()
                    key = rng.randint(1, 400)
                    if kind < 0.35:
                        next_id += 1
                        conn.execute(f"INSERT INTO {table} VALUES (%s, %s)", [next_id, f"i{changes}"])
                    elif kind < 0.8:
                        conn.execute(f"UPDATE {table} SET v = %s WHERE id = %s", [f"u{changes}", key])
                    else:
                        conn.execute(f"DELETE FROM {table} WHERE id = %s", [key])
                    changes += 1
            time.sleep(0.002)
    return changes


if __name__ == "__main__":
    print(run(sys.argv[1], sys.argv[2], sys.argv[3:]))
