"""The file source's split enumerator: discovery, admission and split planning (driver side).

Spark calls :meth:`latest_offset` once per trigger and :meth:`plan_splits` once per batch (again
with the same offsets when it replays a batch after a crash, possibly in a new process). The
offset is a :class:`~sparklink.files.source.position.FilePosition`; the enumerator keeps only
its latest listing in memory, as a cache.

Admission rules (streaming):

* a file is admitted when it sorts after the start position, its arrival key is older than the
  start of the listing minus ``minFileAge`` and a small clock margin (so it is stable and no
  file can later appear before it), and it is within the ``Trigger.AvailableNow`` target;
* admission takes a prefix of the reading order, within ``maxFilesPerTrigger`` /
  ``maxBytesPerTrigger`` (at least one file);
* ``monitorInterval`` limits how often the directory is listed.

Streams list incrementally: only files that sort after the batch's start position are kept,
and the directory walk skips the files of directories that are settled at that position (see
:mod:`~sparklink.files.source.listing`), so the cost of a trigger does not grow with the number
of files already read in unchanged directories.

On S3 (:mod:`~sparklink.files.source.object_listing`) a file's arrival key is its
``LastModified``, which may be older than the time the object became visible: a multipart
upload's object carries the time the upload was initiated. Admission there
(:meth:`FileSplitEnumerator._admit_objects`) does not wait for that: a listed object is
admitted once it is ``minFileAge`` old, and the offset is a *watermark* plus the files admitted
above it (:class:`~sparklink.files.source.position.FilePosition` ``recent``). The watermark is
at most the *horizon*, the listing's start minus ``maxVisibilityDelay`` and a clock margin, and
it never passes a listed file that was not admitted. Assumption: every object appears in
listings within ``maxVisibilityDelay`` of its ``LastModified`` (an upload completes within that
time of its start). Then every object at or below the horizon was in the listing, so no file
below the watermark is ever missed, and ``recent`` holds only files of the last
``maxVisibilityDelay``: the offset stays bounded. The watermark moves only in a batch that
admits files, so an idle stream does not run empty micro-batches.
"""

from __future__ import annotations

import time

from sparklink.files.source.config import FileSourceConfig
from sparklink.files.source.listing import FileStatus, list_sorted, list_sorted_after
from sparklink.files.source.listing_choice import load_enumerator
from sparklink.files.source.position import START, FilePosition
from sparklink.files.source.splits import plan
from sparklink.source import READ_ALL, Offset, ReadLimit, Split, SplitEnumerator
from sparklink.source.packing import default_tasks

CLOCK_MARGIN_NS = 100_000_000  # file-system timestamps may lag the wall clock by a tick
# S3: LastModified has a resolution of 1 s in listings and comes from the store's clock, which
# may differ from the driver's: 1 s of truncation plus 1 s of clock difference
OBJECT_CLOCK_MARGIN_NS = 2_000_000_000


def _visibility_window_ns(config: FileSourceConfig) -> int:
    """S3: how long after its ``LastModified`` an object may still appear in listings
    (``maxVisibilityDelay`` plus the clock margin)."""
    return OBJECT_CLOCK_MARGIN_NS + int(config.max_visibility_delay * 1e9)


class FileSplitEnumerator(SplitEnumerator):
    """Driver side: one instance per query run (streams) or per bounded read."""

    def __init__(self, config: FileSourceConfig, *, streaming: bool, default_partitions: int | None = None):
        self.config = config
        self.streaming = streaming
        self.file_enumerator = load_enumerator(
            config.file_enumerator, config,
            incremental_listing_settle_ns=_visibility_window_ns(config) if config.use_incremental_listing else None)
        self.default_partitions = default_partitions or default_tasks()
        self._listing: list[FileStatus] = []
        self._listed_at_ns: int | None = None
        self._listed_after: FilePosition = START  # the listing holds every file this position does not cover
        self._schema_file: str | None = None
        self.listings = 0  # how many times the directory was listed (for tests and metrics)

    # ------------------------------------------------------------------ listing

    def _list(self, after: FilePosition = START) -> tuple[list[FileStatus], int]:
        """Files after ``after`` in reading order (streams), or all files (bounded reads)."""
        listed_at = time.time_ns()
        if self.streaming:
            hints = {"read": after} if self.config.use_incremental_listing else {}
            files = list_sorted_after(self.file_enumerator, self.config.paths, self.config.path_glob_filter,
                                      after=after.sort_key, cutoff_ns=self._cutoff(listed_at), **hints)
            if after.recent:
                files = [f for f in files if not after.covers(f.sort_key)]
        else:
            files, after = list_sorted(self.file_enumerator, self.config.paths, self.config.path_glob_filter), START
        self._listing, self._listed_at_ns, self._listed_after = files, listed_at, after
        self.listings += 1
        if self._schema_file is None and files:
            self._schema_file = files[0].path  # the first file after the start: names it in drift errors
        return files, listed_at

    def _cutoff(self, listed_at: int) -> int:
        """Arrival keys at or below this are stable and can no longer be preceded by a new file."""
        if not self.streaming:
            return 1 << 62
        return listed_at - CLOCK_MARGIN_NS - int(self.config.min_file_age * 1e9)

    def _horizon(self, listed_at: int) -> int:
        """S3: every object whose LastModified is at or below this was in a listing started at
        ``listed_at`` (the assumption of ``maxVisibilityDelay``)."""
        return listed_at - _visibility_window_ns(self.config)

    # ------------------------------------------------------------------ offsets

    def initial_offset(self) -> Offset:
        if self.config.max_file_age is not None:
            return FilePosition(ts=time.time_ns() - int(self.config.max_file_age * 1e9), path="").to_offset()
        return START.to_offset()

    def latest_offset(self, start: Offset, limit: ReadLimit) -> Offset:
        begin = FilePosition.from_offset(start)
        interval = self.config.monitor_interval
        if (self.streaming and interval and self._listed_at_ns is not None and limit.until is None
                and time.time_ns() - self._listed_at_ns < interval * 1e9):
            return begin.to_offset()  # listed recently enough: nothing new until the next interval
        files, listed_at = self._list(begin)
        return self._admit(begin, limit, files, listed_at).to_offset()

    def _admit(self, begin: FilePosition, limit: ReadLimit, files: list[FileStatus], listed_at: int) -> FilePosition:
        if self.config.store.KEY_LISTING:  # times may precede visibility: admit by a watermark
            return self._admit_objects(begin, limit, files, listed_at)
        return self._admit_prefix(begin, limit, files, listed_at)

    def _limits(self, limit: ReadLimit) -> tuple[int | None, int | None]:
        """Files and bytes one batch may take (None: no limit)."""
        if limit.max_files is None and limit.max_bytes is None:
            return None, None
        return (limit.max_files or self.config.max_files_per_trigger,
                limit.max_bytes or self.config.max_bytes_per_trigger)

    def _admit_prefix(self, begin: FilePosition, limit: ReadLimit, files: list[FileStatus],
                      listed_at: int) -> FilePosition:
        """The position after the longest admissible prefix of ``files`` following ``begin``
        (local files: an arrival key is the time the file became visible)."""
        cutoff = self._cutoff(listed_at)
        until = FilePosition.from_offset(limit.until).sort_key if limit.until is not None else None
        max_files, max_bytes = self._limits(limit)
        end = begin
        taken, taken_bytes = 0, 0
        for file in files:
            if file.sort_key <= begin.sort_key:
                continue
            if file.arrival_ns > cutoff or (until is not None and file.sort_key > until):
                break
            if taken and ((max_files is not None and taken >= max_files)
                          or (max_bytes is not None and taken_bytes + file.size > max_bytes)):
                break
            end = FilePosition(ts=file.arrival_ns, path=file.path)
            taken += 1
            taken_bytes += file.size
        return end

    def _admit_objects(self, begin: FilePosition, limit: ReadLimit, files: list[FileStatus],
                       listed_at: int) -> FilePosition:
        """S3: the position after admitting, in reading order, the listed files ``begin`` does not
        cover that are ``minFileAge`` old (and covered by the ``Trigger.AvailableNow`` target),
        within the rate limits. ``begin`` itself when nothing is admitted.

        The new watermark is the horizon, or the last admitted file before the first listed file
        left out if that one is at or below the horizon (so no left-out file is ever covered);
        never lower than ``begin``'s, never above the target's. ``recent`` keeps every admitted
        file above it."""
        cutoff = self._cutoff(listed_at)
        until = FilePosition.from_offset(limit.until) if limit.until is not None else None
        max_files, max_bytes = self._limits(limit)
        admitted: list[FileStatus] = []
        admitted_bytes = 0
        first_left_out: FileStatus | None = None
        last_before_left_out: FileStatus | None = None
        for file in files:
            if begin.covers(file.sort_key):
                continue
            full = admitted and ((max_files is not None and len(admitted) >= max_files)
                                 or (max_bytes is not None and admitted_bytes + file.size > max_bytes))
            if file.arrival_ns > cutoff or full:
                first_left_out = first_left_out or file
                break  # every later file is younger, or the batch is full
            if until is not None and not until.covers(file.sort_key):
                first_left_out = first_left_out or file
                continue  # not in the Trigger.AvailableNow target
            admitted.append(file)
            admitted_bytes += file.size
            if first_left_out is None:
                last_before_left_out = file
        if not admitted:
            return begin
        horizon = (self._horizon(listed_at) + 1, "")  # covers every file whose LastModified is at or below it
        if first_left_out is None or first_left_out.sort_key > horizon:
            mark = horizon
        else:
            mark = last_before_left_out.sort_key if last_before_left_out is not None else begin.sort_key
        mark = max(mark, begin.sort_key)
        if until is not None:
            mark = max(min(mark, until.sort_key), begin.sort_key)
        recent = sorted({*begin.recent, *(f.sort_key for f in admitted)})
        return FilePosition(ts=mark[0], path=mark[1], recent=tuple(r for r in recent if r > mark))

    def available_now_offset(self, start: Offset | None) -> Offset | None:
        """Everything present now, once stable: files still younger than ``minFileAge`` are
        waited for (at most ``minFileAge`` plus the clock margin), then the target is fixed."""
        if start is None:
            return None
        begin = FilePosition.from_offset(start)
        files, listed_at = self._list(begin)
        newest = max((f.arrival_ns for f in files if not begin.covers(f.sort_key)), default=None)
        if newest is not None and newest > self._cutoff(listed_at):
            settle_ns = newest + CLOCK_MARGIN_NS + int(self.config.min_file_age * 1e9) - time.time_ns()
            if settle_ns > 0:
                time.sleep(settle_ns / 1e9)
                files, listed_at = self._list(begin)
        return self._admit(begin, READ_ALL, files, listed_at).to_offset()

    def supported_limits(self) -> frozenset[str]:
        return frozenset({"max_files", "max_bytes"})

    # ------------------------------------------------------------------ splits

    def plan_splits(self, start: Offset, end: Offset) -> list[Split]:
        begin, stop = FilePosition.from_offset(start), FilePosition.from_offset(end)
        if stop.sort_key <= begin.sort_key and set(stop.recent) <= set(begin.recent):
            return []
        if (self._listed_at_ns is None or stop.ts > self._cutoff(self._listed_at_ns)
                or begin.sort_key < self._listed_after.sort_key
                or (self.config.store.KEY_LISTING and begin != self._listed_after)):
            self._list(begin)  # a replay (new process, or an older batch): list again (admitted files are immutable)
        batch = [f for f in self._listing if not begin.covers(f.sort_key) and stop.covers(f.sort_key)]
        return plan(batch, self.config, default_partitions=self.default_partitions,
                    split_prefix=f"{stop.ts}", schema_file=self._schema_file)
