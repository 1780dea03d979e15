"""Benchmark, without Spark: where an S3 part file's time goes, against the plain client.

    .venv/bin/python bench/bench_s3_parts.py [--rows 3000000] [--repeat 3] [--tasks 2]

Each of ``--tasks`` processes (the sink's tasks) encodes its own ``--rows`` rows (the shapes of
bench_data.py, built with pyarrow before anything is timed, in batches of 10,000 rows as Spark
hands them over) to Parquet with pyarrow's ``ParquetWriter`` (the sink's settings: snappy,
1 MiB pages, statistics), into:

* ``encode-memory``: an in-memory buffer (the encoding alone);
* ``encode-local``: a local file, fsynced (the sink on local disk);
* ``encode-s3-inline``: an S3 part file (:class:`~sparklink.storage.multipart_file.MultipartFile`)
  uploading each full part before the encoder goes on;
* ``encode-s3``: the same with the part file's default (parts uploading in the background while
  the encoder goes on, a bounded number in flight);
* ``plain-upload``: the floor: the bytes ``encode-local`` wrote put to the same server with
  pyarrow's ``S3FileSystem``, nothing encoded.

Cases alternate within each run; the slowest task's time counts, the best of ``--repeat`` runs
is printed with the load average. ``s3 extra`` is ``encode-s3 - encode-local``.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_data import SHAPES, check_shapes, make_table  # noqa: E402

_state: dict = {}


def make_batches(shape: str, rows: int, seed: int) -> list[pa.RecordBatch]:
    """One task's rows (its own ids and random values), in batches of 10,000 rows as Spark hands them over."""
    return make_table(shape, rows, first_id=seed * rows, seed=seed).to_batches(max_chunksize=10_000)


def _init(shape: str, rows: int, options: dict, directory: str) -> None:
    from sparklink.storage import S3Config, S3Location
    from sparklink.storage.s3 import S3Storage

    _state["batches"] = make_batches(shape, rows, os.getpid() % 7)
    config = S3Config.from_options(options)
    _state["storage"] = S3Storage(S3Location(scheme="s3", bucket=options["bucket"], prefix="parts"), config)
    _state["filesystem"] = config.arrow_filesystem()
    _state["bucket"] = options["bucket"]
    _state["dir"] = Path(directory)
    _state["local"] = None


def _encode(sink) -> None:
    batches = _state["batches"]
    writer = pq.ParquetWriter(sink, batches[0].schema, compression="snappy", write_statistics=True,
                              data_page_size=1024 * 1024, dictionary_pagesize_limit=1024 * 1024)
    table = pa.Table.from_batches(batches)  # the sink hands a row group's batches over as one table
    writer.write_table(table, row_group_size=table.num_rows)
    writer.close()


def _serve(pipe, shape: str, rows: int, options: dict, directory: str) -> None:
    """One task's process: builds its rows, then runs each case it is sent, answering the seconds."""
    _init(shape, rows, options, directory)
    while (message := pipe.recv()) is not None:
        pipe.send(run_case(*message))


def run_case(case: str, run: int) -> float:
    from sparklink.storage.multipart_file import MultipartFile

    name = f"{case}-{os.getpid()}-{run}"
    started = time.perf_counter()
    if case == "encode-memory":
        _encode(pa.BufferOutputStream())
    elif case == "encode-local":
        path = _state["dir"] / f"{name}.parquet"
        _encode(pa.OSFile(str(path), "wb"))
        with open(path, "rb+") as handle:
            os.fsync(handle.fileno())
        _state["local"] = path
    elif case in ("encode-s3", "encode-s3-inline", "encode-s3-32mb"):
        extra: dict[str, int] = {"uploads_in_flight": 0} if case == "encode-s3-inline" else {}
        if case == "encode-s3-32mb":  # tuned: s3.partSize=32MB (S3A's own default part is 64 MiB)
            extra["part_size"] = 32 << 20
        part = MultipartFile.create(_state["storage"], name, **extra)
        sink = pa.BufferedOutputStream(pa.PythonFile(part, mode="w"), buffer_size=1024 * 1024)
        _encode(sink)
        sink.close()  # as the sink's writer: pyarrow's buffer flushed, then the part file closed
        part.close()
        pending = part.pending()
        _state["storage"].complete_upload(pending.key, pending.upload_id, pending.parts)
    elif case == "plain-upload":
        data = _state["local"].read_bytes()
        started = time.perf_counter()
        with _state["filesystem"].open_output_stream(f"{_state['bucket']}/plain/{name}") as out:
            out.write(data)
    else:
        raise ValueError(case)
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=3_000_000, help="rows per task")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--tasks", type=int, default=2)
    parser.add_argument("--shapes", default=",".join(SHAPES), help="comma-separated: " + ", ".join(SHAPES))
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from sparklink.testing.seaweedfs import BENCH_VOLUME_SIZE_MB, start_seaweedfs

    cases = ["encode-memory", "encode-local", "encode-s3-inline", "encode-s3", "encode-s3-32mb", "plain-upload"]
    server = start_seaweedfs(volume_size_limit_mb=BENCH_VOLUME_SIZE_MB)
    try:
        bucket = server.create_bucket("parts")
        options = dict(server.options(), bucket=bucket)
        for shape in check_shapes(args.shapes):
            with tempfile.TemporaryDirectory() as directory:
                pipes, workers = [], []
                for _ in range(args.tasks):
                    ours, theirs = multiprocessing.Pipe()
                    worker = multiprocessing.Process(target=_serve, args=(theirs, shape, args.rows, options, directory))
                    worker.start()
                    pipes.append(ours)
                    workers.append(worker)
                best: dict[str, float] = {}
                loads = []
                try:
                    for run in range(args.repeat):
                        order = cases[:-1][::-1 if run % 2 else 1] + ["plain-upload"]  # plain-upload after local
                        for case in order:
                            loads.append(os.getloadavg()[0])
                            for pipe in pipes:
                                pipe.send((case, run))
                            seconds = max(pipe.recv() for pipe in pipes)
                            best[case] = min(best.get(case, seconds), seconds)
                finally:
                    for pipe in pipes:
                        pipe.send(None)
                    for worker in workers:
                        worker.join()
                size = sum(p.stat().st_size for p in Path(directory).glob("encode-local-*")) / args.repeat
            print(f"\n{shape}: {args.tasks} tasks x {args.rows:,} rows, {size / 2 ** 20:.0f} MiB of Parquet a run, "
                  f"best of {args.repeat}, load average {min(loads):.1f}-{max(loads):.1f}")
            for case in cases:
                print(f"  {case:<18}{best[case]:>7.2f} s")
            extra = best["encode-s3"] - best["encode-local"]
            print(f"  s3 extra {extra:+.2f} s (inline {best['encode-s3-inline'] - best['encode-local']:+.2f} s) "
                  f"against plain-upload {best['plain-upload']:.2f} s: {extra / best['plain-upload']:.2f}x")
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
