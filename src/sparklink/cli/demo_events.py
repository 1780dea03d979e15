"""The demo's event generator: sensor readings dropped into a landing directory over time.

Runs in a thread of the demo's driver process. Each file is written under a hidden name and
then renamed into the landing directory (the atomic-move convention the file source relies
on). A few records are late (event time up to three hours back) and a few lines are
malformed (broken JSON or a wrong type), as in real feeds.
"""

from __future__ import annotations

import json
import os
import random
import threading
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

SCHEMA_DDL = "seq LONG, sensor_id STRING, event_time TIMESTAMP, temperature DOUBLE, humidity DOUBLE"


@dataclass
class GeneratorStats:
    files: int = 0
    valid_rows: int = 0
    malformed_lines: int = 0
    late_rows: int = 0


@dataclass
class EventGenerator:
    """Writes ``rows_per_file`` readings every ``interval`` seconds until stopped."""

    landing: Path
    rows_per_file: int = 500
    interval: float = 0.5
    seed: int = 42
    stats: GeneratorStats = field(default_factory=GeneratorStats)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __post_init__(self) -> None:
        self.landing.mkdir(parents=True, exist_ok=True)
        self._random = random.Random(self.seed)
        self._lock = threading.Lock()

    def write_file(self) -> None:
        """Write one file of readings (also called directly for the final file)."""
        with self._lock:
            now = datetime.now(timezone.utc)
            lines = []
            for _ in range(self.rows_per_file):
                roll = self._random.random()
                if roll < 0.01:
                    lines.append('{"seq": 1, "sensor_id": "s-broken", "event_time": ')  # truncated JSON
                    self.stats.malformed_lines += 1
                    continue
                if roll < 0.02:
                    lines.append(json.dumps({"seq": "not-a-number", "sensor_id": "s-000",
                                             "event_time": now.isoformat(), "temperature": "warm"}))
                    self.stats.malformed_lines += 1
                    continue
                event_time = now - timedelta(seconds=self._random.uniform(0, 5))
                if roll > 0.97:
                    event_time -= timedelta(hours=self._random.randint(1, 3))
                    self.stats.late_rows += 1
                lines.append(json.dumps({
                    "seq": self.stats.valid_rows,
                    "sensor_id": f"s-{self._random.randint(0, 49):03d}",
                    "event_time": event_time.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z",
                    "temperature": round(self._random.gauss(21.0, 4.0), 2),
                    "humidity": round(self._random.uniform(20, 80), 1),
                }))
                self.stats.valid_rows += 1
            name = f"events-{self.stats.files:06d}.json"
            hidden = self.landing / f".{name}.tmp"
            hidden.write_text("\n".join(lines) + "\n", encoding="utf-8")
            os.rename(hidden, self.landing / name)
            self.stats.files += 1

    def _run(self) -> None:
        while not self._stop.is_set():
            self.write_file()
            self._stop.wait(self.interval)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="demo-event-generator", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
