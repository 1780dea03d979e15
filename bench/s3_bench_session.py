"""What the S3 benchmarks share: a private SeaweedFS on 127.0.0.1, a local Spark session with the
sparklink formats registered, and a scratch directory (all three are gone at the end); and the
timing of the plain client's floor, and the CPU seconds of the processes a run keeps busy."""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from process_cpu import descendants_cpu


@contextmanager
def spark_with_seaweedfs(app_name: str) -> Iterator[tuple[Any, Any, Path]]:
    """``(spark, server, work directory)``; the server is stopped even if Spark fails to start.
    The session has Spark's S3A connector (the ``hadoop-aws`` set of tests/jvm, resolved by
    ``make jvm``) on ``spark.jars``, set up for the server: the peer of sparklink's S3 sink and
    source runs in the same session, on the same server."""
    import sparklink
    from sparklink.testing.peers import s3a_conf
    from sparklink.testing.seaweedfs import BENCH_VOLUME_SIZE_MB, start_seaweedfs
    from sparklink.testing.spark_session import spark_session

    work = Path(tempfile.mkdtemp(prefix=f"{app_name}-"))
    server = start_seaweedfs(volume_size_limit_mb=BENCH_VOLUME_SIZE_MB)
    try:
        conf = s3a_conf(server.endpoint, server.access_key_id, server.secret_access_key, server.region)
        spark = spark_session(app_name=app_name, extra=conf)
        try:
            sparklink.register(spark)
            yield spark, server, work
        finally:
            spark.stop()
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)


def timed_in_two_threads(items: Iterable[Any], work: Callable[[Any], None]) -> float:
    """Seconds for two threads (as the two tasks of ``local[2]``) to run ``work`` on every item,
    each thread taking the next one."""
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=2) as pool:
        list(pool.map(work, items))
    return time.perf_counter() - started


def cpu_seconds_by_kind() -> dict[str, float]:
    """CPU seconds (user + system) so far of this process's descendants, by kind: ``jvm`` (Spark),
    ``python`` (its Python workers: decoding, hand-over), ``store`` (the SeaweedFS server). On
    two cores a run that keeps both busy is bounded by the sum, not by any one process."""
    kinds = {"jvm": 0.0, "python": 0.0, "store": 0.0}
    for name, seconds in descendants_cpu().values():
        kind = "jvm" if name == "java" else "store" if name == "weed" else "python" if name.startswith("python") else None
        if kind is not None:
            kinds[kind] += seconds
    return kinds
