"""CPU seconds of the benchmark's own processes, read from /proc (Linux): what the benchmarks
report beside wall time, since on two cores a run that keeps both busy is bounded by its CPU."""

from __future__ import annotations

import os


def descendants_cpu() -> dict[int, tuple[str, float]]:
    """``pid -> (command name, CPU seconds so far, user + system)`` of every descendant of this
    process: Spark's JVM, its Python workers, servers the benchmark started."""
    tick = os.sysconf("SC_CLK_TCK")
    parents: dict[int, int] = {}
    seen: dict[int, tuple[str, float]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                text = handle.read()
        except OSError:  # the process ended while we looked
            continue
        fields = text.rpartition(")")[2].split()
        pid = int(entry)
        parents[pid] = int(fields[1])
        seen[pid] = (text.partition("(")[2].rpartition(")")[0], (int(fields[11]) + int(fields[12])) / tick)
    found: dict[int, tuple[str, float]] = {}
    frontier = [os.getpid()]
    while frontier:
        parent = frontier.pop()
        for pid, ppid in parents.items():
            if ppid == parent:
                found[pid] = seen[pid]
                frontier.append(pid)
    return found
