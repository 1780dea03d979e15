"""Rolling policies (Flink's RollingPolicy): when an in-progress part file becomes pending.

* :class:`OnCheckpointRollingPolicy` (``rollingPolicy=checkpoint``): every file rolls at the
  end of each micro-batch, and optionally earlier once it reaches ``maxPartSize`` or has been
  open ``rolloverInterval``. The only policy for bulk formats (Parquet, Avro, ORC).
* :class:`DefaultRollingPolicy` (``rollingPolicy=default``, row formats only): an in-progress
  file per (bucket, partition id) is carried across micro-batches and appended to by the next
  batch's task; it rolls when it reaches ``maxPartSize`` (checked by the writing task after each
  record batch) or, on the driver at each commit, when it has been open ``rolloverInterval`` or
  not written for ``inactivityInterval``.

Values only; evaluated on executors (size) and on the driver (time).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from sparklink.errors import ConfigError
from sparklink.files.sink.options import POLICY_CHECKPOINT, POLICY_DEFAULT
from sparklink.files.sink.options import FileSinkOptions as O

ROLLING_POLICY, MAX_PART_SIZE = O.rolling_policy.key, O.max_part_size.key
ROLLOVER_INTERVAL, INACTIVITY_INTERVAL = O.rollover_interval.key, O.inactivity_interval.key
DEFAULT_MAX_PART_SIZE = 128 * 1024 * 1024
DEFAULT_ROLLOVER_INTERVAL = 60.0
DEFAULT_INACTIVITY_INTERVAL = 60.0


class RollingPolicy:
    """Common interface: size checks (executor) and time checks (driver)."""

    name = ""
    max_part_size: int | None
    rollover_interval: float | None

    @property
    def carries_across_batches(self) -> bool:
        return False

    def should_roll_on_size(self, size: int) -> bool:
        return self.max_part_size is not None and size >= self.max_part_size

    def should_roll_on_time(self, *, created_at: float, last_write_at: float, now: float) -> bool:
        return self.rollover_interval is not None and now - created_at >= self.rollover_interval

    def to_options(self) -> dict[str, str]:
        raise NotImplementedError


def _check(option: str, value: float | int | None, *, positive: bool) -> None:
    if value is None:
        return
    if value < 0 or (positive and value == 0):
        raise ConfigError(option, f"must be {'greater than 0' if positive else 'at least 0'}, got {value}")


@dataclass(frozen=True, kw_only=True)
class DefaultRollingPolicy(RollingPolicy):
    """Flink's DefaultRollingPolicy: roll on size, on age, or on inactivity (row formats).

    Defaults as in Flink: 128 MiB, 60 s, 60 s. Sizes in bytes, intervals in seconds.
    """

    max_part_size: int = DEFAULT_MAX_PART_SIZE
    rollover_interval: float = DEFAULT_ROLLOVER_INTERVAL
    inactivity_interval: float = DEFAULT_INACTIVITY_INTERVAL
    name = POLICY_DEFAULT

    def __post_init__(self) -> None:
        _check(MAX_PART_SIZE, self.max_part_size, positive=True)
        _check(ROLLOVER_INTERVAL, self.rollover_interval, positive=False)
        _check(INACTIVITY_INTERVAL, self.inactivity_interval, positive=False)

    @staticmethod
    def builder() -> "DefaultRollingPolicy":
        return DefaultRollingPolicy()

    def with_max_part_size(self, size: int) -> "DefaultRollingPolicy":
        return dataclasses.replace(self, max_part_size=size)

    def with_rollover_interval(self, seconds: float) -> "DefaultRollingPolicy":
        return dataclasses.replace(self, rollover_interval=seconds)

    def with_inactivity_interval(self, seconds: float) -> "DefaultRollingPolicy":
        return dataclasses.replace(self, inactivity_interval=seconds)

    def build(self) -> "DefaultRollingPolicy":
        return self

    @property
    def carries_across_batches(self) -> bool:
        return True

    def should_roll_on_time(self, *, created_at: float, last_write_at: float, now: float) -> bool:
        return now - created_at >= self.rollover_interval or now - last_write_at >= self.inactivity_interval

    def to_options(self) -> dict[str, str]:
        return {ROLLING_POLICY: self.name, MAX_PART_SIZE: str(self.max_part_size),
                ROLLOVER_INTERVAL: f"{self.rollover_interval}s",
                INACTIVITY_INTERVAL: f"{self.inactivity_interval}s"}


@dataclass(frozen=True, kw_only=True)
class OnCheckpointRollingPolicy(RollingPolicy):
    """Flink's OnCheckpointRollingPolicy / CheckpointRollingPolicy: roll every micro-batch,
    and also when a file reaches ``max_part_size`` bytes or is ``rollover_interval`` s old.
    ``inactivity_interval`` is accepted for symmetry with the default policy; a file that
    rolls on checkpoint is closed with its micro-batch, so it never waits that long."""

    max_part_size: int | None = None
    rollover_interval: float | None = None
    inactivity_interval: float | None = None
    name = POLICY_CHECKPOINT

    def __post_init__(self) -> None:
        _check(MAX_PART_SIZE, self.max_part_size, positive=True)
        _check(ROLLOVER_INTERVAL, self.rollover_interval, positive=False)
        _check(INACTIVITY_INTERVAL, self.inactivity_interval, positive=False)

    @staticmethod
    def build(max_part_size: int | None = None, rollover_interval: float | None = None,
              inactivity_interval: float | None = None) -> "OnCheckpointRollingPolicy":
        return OnCheckpointRollingPolicy(max_part_size=max_part_size, rollover_interval=rollover_interval,
                                         inactivity_interval=inactivity_interval)

    def to_options(self) -> dict[str, str]:
        options = {ROLLING_POLICY: self.name}
        if self.max_part_size is not None:
            options[MAX_PART_SIZE] = str(self.max_part_size)
        if self.rollover_interval is not None:
            options[ROLLOVER_INTERVAL] = f"{self.rollover_interval}s"
        if self.inactivity_interval is not None:
            options[INACTIVITY_INTERVAL] = f"{self.inactivity_interval}s"
        return options
