"""Spark's parse modes for malformed records: PERMISSIVE, DROPMALFORMED, FAILFAST.

Executor side. A format calls :meth:`BadRecords.malformed` once per bad record with where it
is; the policy raises (FAILFAST), drops it (DROPMALFORMED) or keeps it with nulls and its raw
text in the corrupt-record column (PERMISSIVE). Errors name the file and the line or byte
offset of the record.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sparklink.errors import DataError


def location(*, byte_offset: int, line: int | None) -> str:
    if line is not None:
        return f"line {line} (byte offset {byte_offset})"
    return f"byte offset {byte_offset}"


@dataclass(kw_only=True)
class BadRecords:
    """The mode in force for one segment of one file, and what it has dropped."""

    mode: str
    path: str
    corrupt_column: str | None  # the column that receives raw text in PERMISSIVE mode, if in the schema
    dropped: int = 0
    kept: list[str] = field(default_factory=list)

    def malformed(self, *, where: str, reason: str) -> bool:
        """Account for one malformed record; True if it is kept (PERMISSIVE)."""
        if self.mode == "FAILFAST":
            raise DataError(f"{self.path}: malformed record at {where}: {reason} (mode FAILFAST; use "
                            "PERMISSIVE or DROPMALFORMED to keep or skip such records)")
        if self.mode == "DROPMALFORMED":
            self.dropped += 1
            return False
        return True
