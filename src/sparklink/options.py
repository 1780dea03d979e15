"""Parsing of string options (driver side, at query start).

Spark hands every option over as a string. These helpers turn them into typed values and
raise :class:`~sparklink.errors.ConfigError` naming the option when a value is malformed.
Option maps from Spark are case-insensitive; :class:`Options` mirrors that.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping
from typing import Any

from sparklink.errors import ConfigError

_SIZE_UNITS = {
    "": 1, "b": 1,
    "k": 1024, "kb": 1024, "kib": 1024,
    "m": 1024**2, "mb": 1024**2, "mib": 1024**2,
    "g": 1024**3, "gb": 1024**3, "gib": 1024**3,
    "t": 1024**4, "tb": 1024**4, "tib": 1024**4,
}
_DURATION_UNITS = {
    "ms": 0.001, "msec": 0.001, "millis": 0.001, "milliseconds": 0.001,
    "": 1.0, "s": 1.0, "sec": 1.0, "secs": 1.0, "second": 1.0, "seconds": 1.0,
    "m": 60.0, "min": 60.0, "mins": 60.0, "minute": 60.0, "minutes": 60.0,
    "h": 3600.0, "hour": 3600.0, "hours": 3600.0,
    "d": 86400.0, "day": 86400.0, "days": 86400.0,
}
# Options Spark itself adds to a streaming sink's options (e.g. from .queryName(...)); never the
# connector's, never "unknown".
SPARK_PROVIDED_OPTIONS = ("checkpointLocation", "queryName")
_NUMBER_WITH_UNIT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


def parse_size(option: str, value: str | int) -> int:
    """``"128MB"`` -> 134217728 bytes (binary units, as Flink's MemorySize)."""
    if isinstance(value, int):
        if value < 0:
            raise ConfigError(option, f"size must not be negative, got {value}")
        return value
    match = _NUMBER_WITH_UNIT.match(str(value))
    unit = match.group(2).lower() if match else None
    if not match or unit not in _SIZE_UNITS:
        raise ConfigError(option, f"'{value}' is not a size", "a number with an optional unit: B, KB, MB, GB, TB")
    return int(float(match.group(1)) * _SIZE_UNITS[unit])


def parse_duration(option: str, value: str | int | float) -> float:
    """``"15min"`` -> 900.0 seconds. A bare number is seconds."""
    if isinstance(value, (int, float)):
        if value < 0:
            raise ConfigError(option, f"duration must not be negative, got {value}")
        return float(value)
    match = _NUMBER_WITH_UNIT.match(str(value))
    unit = match.group(2).lower() if match else None
    if not match or unit not in _DURATION_UNITS:
        raise ConfigError(option, f"'{value}' is not a duration", "a number with a unit: ms, s, min, h, d")
    return float(match.group(1)) * _DURATION_UNITS[unit]


def parse_bool(option: str, value: str | bool) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes", "on"):
        return True
    if text in ("false", "0", "no", "off"):
        return False
    raise ConfigError(option, f"'{value}' is not a boolean", "true, false")


def parse_int(option: str, value: str | int, *, minimum: int | None = None) -> int:
    try:
        number = int(str(value).strip())
    except ValueError:
        raise ConfigError(option, f"'{value}' is not an integer") from None
    if minimum is not None and number < minimum:
        raise ConfigError(option, f"must be at least {minimum}, got {number}")
    return number


def parse_choice(option: str, value: str, choices: Iterable[str]) -> str:
    allowed = list(choices)
    text = str(value).strip().lower()
    for choice in allowed:
        if choice.lower() == text:
            return choice
    raise ConfigError(option, f"unknown value '{value}'", ", ".join(allowed))


class Options(Mapping[str, str]):
    """A case-insensitive, read-only view of a connector's string options.

    Keys keep the user's spelling for messages; look-ups ignore case, as in Spark.
    """

    def __init__(self, options: Mapping[str, Any] | None = None):
        self._by_lower: dict[str, tuple[str, str]] = {}
        for key, value in (options or {}).items():
            self._by_lower[key.lower()] = (key, str(value))

    def __getitem__(self, key: str) -> str:
        return self._by_lower[key.lower()][1]

    def __iter__(self):
        return (original for original, _ in self._by_lower.values())

    def __len__(self) -> int:
        return len(self._by_lower)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and key.lower() in self._by_lower

    def require(self, key: str) -> str:
        if key not in self:
            raise ConfigError(key, "is required")
        value = self[key]
        if not value.strip():
            raise ConfigError(key, "must not be empty")
        return value

    def to_dict(self) -> dict[str, str]:
        return {original: value for original, value in self._by_lower.values()}

    def reject_unknown(self, known: Iterable[str], *, ignore: Iterable[str] = ()) -> None:
        """Raise ConfigError for any key not in ``known`` (case-insensitive). Options Spark adds
        itself (``SPARK_PROVIDED_OPTIONS``) are always accepted."""
        allowed = {k.lower() for k in known} | {k.lower() for k in ignore} | {k.lower() for k in SPARK_PROVIDED_OPTIONS}
        for original, _ in self._by_lower.values():
            if original.lower() not in allowed:
                raise ConfigError(original, "unknown option" + did_you_mean(original, known), ", ".join(sorted(known)))


def did_you_mean(key: str, known: Iterable[str]) -> str:
    """`` (did you mean 'maxFilesPerTrigger'?)`` for the known key closest to ``key``, or ``""``.

    Compared lower-cased: Spark hands a Python data source its option keys lower-cased, so a
    key from ``.option(...)`` arrives as ``maxfilespertriger``; the suggestion gives the
    spelling the documentation uses."""
    by_lower = {k.lower(): k for k in known}
    close = difflib.get_close_matches(key.lower(), list(by_lower), n=1, cutoff=0.75)
    return f" (did you mean '{by_lower[close[0]]}'?)" if close else ""
