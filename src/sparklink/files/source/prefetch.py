"""Reading a split's S3 objects ahead of the decoder (executor side, inside one task).

Small objects: a split of many small objects would otherwise pay each object's requests one
after another (a HEAD, the footer, one GET per column chunk for Parquet: about 5 ms an object
on a store on the same host) while the task's core waits. :class:`ObjectPrefetch` fetches each
small object whole (a HEAD for its current length, then one GET) on a small thread pool, in the
order the split reads them, while the current object is decoded; the reader then serves the
format from those bytes (:func:`~sparklink.storage.file_input.serving`), so the format code
is the same as for any other file. Bounds, per task: at most :data:`PREFETCH_THREADS` GETs in
flight and :data:`PREFETCH_AHEAD_BYTES` (by listed sizes) fetched but not yet read (an object is
only started when the bytes ahead of the reader stay under it, or when nothing is ahead); only
whole objects of at most :data:`SMALL_OBJECT_BYTES` are prefetched. Memory: at most
``PREFETCH_AHEAD_BYTES + SMALL_OBJECT_BYTES`` (40 MiB) per task besides the decoding.

Large objects of ORC and Avro, which decode as they read (the reader decides):
:class:`ReadAheadFile` reads them in blocks of :data:`READ_AHEAD_BLOCK_BYTES` by ranged GETs, and
each read starts the GETs of the next :data:`READ_AHEAD_BLOCKS` blocks (never past the object's
end), so the next stripes or blocks download while the current ones are decoded. Memory: the
blocks of the current read plus 16 MiB ahead, per task. (Large Parquet objects are fetched by
pyarrow's own pre-buffering, a row group at a time: :mod:`sparklink.formats.parquet`.)

Failures change nothing: a small object whose prefetch fails (deleted since the listing, the
store unreachable) is not served, and the format opens the object itself, which raises what it
always raised (a missing file, a storage error naming the object), so ``ignoreMissingFiles``
and the task's retries behave as without prefetching; a block that fails to download is
raised by the read that needs it.
"""

from __future__ import annotations

import io
from collections import deque
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from sparklink.storage.file_input import whole_object
from sparklink.storage.s3_config import S3Config

SMALL_OBJECT_BYTES = 8 * 1024 * 1024    # whole objects up to this size are prefetched
PREFETCH_AHEAD_BYTES = 32 * 1024 * 1024  # fetched and not yet read, per task
PREFETCH_THREADS = 8                     # requests in flight per task (a HEAD, then the GET, per object)


@dataclass(frozen=True)
class _Wanted:
    index: int  # the segment's position in the split
    path: str
    size: int


class ObjectPrefetch:
    """Fetches the whole objects ``wanted`` (``(segment index, path, size)`` in read order)
    ahead of the reader, within the bounds above. One per split read; :meth:`close` it."""

    def __init__(self, s3: S3Config | None, wanted: Sequence[tuple[int, str, int]], *,
                 threads: int = PREFETCH_THREADS, ahead_bytes: int = PREFETCH_AHEAD_BYTES):
        self._s3 = s3  # the store's settings (the source's S3Config)
        self._queue = deque(_Wanted(i, p, s) for i, p, s in wanted)
        self._started: deque[tuple[_Wanted, Future[Any]]] = deque()
        self._ahead = 0  # bytes of the started, not yet taken objects
        self._limit = ahead_bytes
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="sparklink-prefetch") \
            if self._queue else None
        self._fill()

    def _fill(self) -> None:
        while self._queue and (not self._started or self._ahead + self._queue[0].size <= self._limit):
            item = self._queue.popleft()
            assert self._pool is not None
            self._started.append((item, self._pool.submit(self._fetch, item)))
            self._ahead += item.size

    def _fetch(self, item: _Wanted) -> Any:
        # the object's current length (a HEAD), then all of it in one GET: what the format would
        # read if it opened the object itself now, even if it changed since the listing
        return whole_object(item.path, self._s3)

    def take(self, index: int) -> Any:
        """The bytes (a ``pyarrow.Buffer``) of segment ``index`` once fetched; None when it is not
        prefetched or its fetch failed (the format then opens the object itself)."""
        while self._started and self._started[0][0].index < index:  # skipped by the reader: drop it
            self._drop_head()
        if not self._started or self._started[0][0].index != index:
            return None
        item, future = self._started[0]
        try:
            data = future.result()
        except Exception:  # served from the store by the format instead, which reports the failure
            data = None
        self._drop_head()
        return data

    def _drop_head(self) -> None:
        item, future = self._started.popleft()
        future.cancel()
        self._ahead -= item.size
        self._fill()

    def close(self) -> None:
        """Stop: fetches not started are cancelled, those running finish and are dropped."""
        for _, future in self._started:
            future.cancel()
        self._started.clear()
        self._queue.clear()
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None


READ_AHEAD_BLOCK_BYTES = 4 * 1024 * 1024  # one ranged GET of a large object
READ_AHEAD_BLOCKS = 4                     # blocks fetched ahead of the reader's position, per object read


@dataclass(frozen=True)
class ReadAhead:
    """How a large object is read: by :class:`ReadAheadFile`, which fetches up to ``blocks``
    blocks past the reader's position. (Text segments, the only byte ranges, are fetched whole
    by their formats.)"""

    blocks: int = READ_AHEAD_BLOCKS
    block_bytes: int = READ_AHEAD_BLOCK_BYTES

    def open(self, native: Any) -> "ReadAheadFile":
        return ReadAheadFile(native, blocks=self.blocks, block_bytes=self.block_bytes)


class ReadAheadFile(io.RawIOBase):
    """A large S3 object as a seekable binary file whose reads overlap its download: the object
    is read in blocks of ``block_bytes`` by ranged GETs (``native``: pyarrow's random-access S3
    file, whose ``read_at`` is thread-safe), and each read also starts the GETs of the
    ``blocks`` blocks after it on a pool of as many threads, so the next stripes or blocks
    arrive while the current ones are decoded. Blocks before the current read are dropped:
    memory is the blocks of the current read plus ``blocks * block_bytes`` (16 MiB) ahead."""

    def __init__(self, native: Any, *, blocks: int = READ_AHEAD_BLOCKS, block_bytes: int = READ_AHEAD_BLOCK_BYTES):
        super().__init__()
        self._native = native
        self._size = native.size()
        self._block = block_bytes
        self._ahead = blocks
        self._position = 0
        self._blocks: dict[int, Future[bytes]] = {}
        self._pool = ThreadPoolExecutor(max_workers=max(1, blocks), thread_name_prefix="sparklink-read-ahead")

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._position, io.SEEK_END: self._size}[whence]
        self._position = max(0, base + offset)
        return self._position

    def size(self) -> int:
        return self._size

    def _fetch(self, index: int) -> bytes:
        start = index * self._block
        return self._native.read_at(min(self._block, self._size - start), start)

    def _want(self, first: int, last: int) -> None:
        """Blocks ``first..last`` and the read-ahead after them started; blocks outside dropped."""
        top = max(last, min(last + self._ahead, (self._size - 1) // self._block))  # not past the end
        for index in [i for i in self._blocks if i < first or i > top]:
            self._blocks.pop(index).cancel()
        for index in range(first, top + 1):
            if index not in self._blocks:
                self._blocks[index] = self._pool.submit(self._fetch, index)

    def read(self, size: int | None = -1) -> bytes:
        if self.closed:
            raise ValueError("read of a closed object")
        stop = self._size if size is None or size < 0 else min(self._size, self._position + size)
        if stop <= self._position:
            return b""
        first = self._position // self._block
        last = (stop - 1) // self._block
        self._want(first, last)
        pieces = []
        for index in range(first, last + 1):
            data = self._blocks[index].result()
            base = index * self._block
            pieces.append(data[max(0, self._position - base):stop - base])
        self._position = stop
        return pieces[0] if len(pieces) == 1 else b"".join(pieces)

    def readall(self) -> bytes:
        return self.read(-1)

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(memoryview(buffer)))
        memoryview(buffer).cast("B")[:len(data)] = data
        return len(data)

    def close(self) -> None:
        if not self.closed:
            for future in self._blocks.values():
                future.cancel()
            self._blocks.clear()
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._native.close()
        super().close()
