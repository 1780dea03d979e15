"""The declarative pipeline file of ``sparklink run`` (TOML), parsed and checked (driver side).

```toml
[spark]                        # optional
master = "local[*]"            # --master on the command line wins
app_name = "events"
conf = { "spark.sql.shuffle.partitions" = "4" }

[sources.raw]                  # each source becomes a temporary view named after it
format = "sparklink.files"
schema = "id LONG, event_time TIMESTAMP, value DOUBLE"   # optional
options = { path = "landing", format = "json" }

[transform]                    # optional with one source
sql = "SELECT id, event_time, value * 2 AS value FROM raw"

[[sinks]]
name = "files"
format = "sparklink.files"
checkpoint = "checkpoints/files"
options = { path = "out", format = "parquet" }

[trigger]                      # optional; default availableNow
mode = "processingTime"        # availableNow | processingTime
interval = "10 seconds"
```

Every problem raises :class:`PipelineError` naming the file, the key and its line.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sparklink.errors import ConfigError

TRIGGER_MODES = ("availableNow", "processingTime")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class PipelineError(ConfigError):
    """A pipeline file is malformed; the message names the file, key and line."""

    def __init__(self, path: Path, key: str, line: int | None, problem: str):
        self.path, self.key, self.line = path, key, line
        where = f"{path}, line {line}" if line else str(path)
        Exception.__init__(self, f"{where}: '{key}': {problem}")


@dataclass(frozen=True, kw_only=True)
class SourceSpec:
    name: str
    format: str
    schema: str | None
    options: dict[str, str]


@dataclass(frozen=True, kw_only=True)
class SinkSpec:
    name: str
    format: str
    checkpoint: str
    options: dict[str, str]


@dataclass(frozen=True, kw_only=True)
class PipelineSpec:
    path: Path
    master: str | None
    app_name: str
    spark_conf: dict[str, str]
    sources: list[SourceSpec]
    sql: str | None
    sinks: list[SinkSpec]
    trigger_mode: str = "availableNow"
    trigger_interval: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class _Locator:
    """Finds the line of a dotted key in the TOML text (tomllib keeps no positions)."""

    def __init__(self, text: str):
        self.lines = text.splitlines()

    def line_of(self, dotted: str) -> int | None:
        parts = dotted.replace("]", "").split(".")
        leaf = parts[-1].split("[")[0]
        tables = [p.split("[")[0] for p in parts[:-1]]
        header_hit = None
        for number, raw in enumerate(self.lines, start=1):
            line = raw.strip()
            if line.startswith("["):
                header = line.strip("[]").strip()
                header_hit = number if tables and header == ".".join(tables) else None
                if header == ".".join(tables + [leaf]):
                    return number
                continue
            if re.match(rf'^"?{re.escape(leaf)}"?\s*=', line) and (header_hit or not tables):
                return number
        return None


def locate(path: Path, key: str) -> int | None:
    """The line of the dotted ``key`` in the pipeline file ``path`` (None if not found)."""
    try:
        return _Locator(path.read_text(encoding="utf-8")).line_of(key)
    except OSError:
        return None


def _error(path: Path, locator: _Locator, key: str, problem: str) -> PipelineError:
    return PipelineError(path, key, locator.line_of(key), problem)


def _string(path, locator, table: dict, key: str, dotted: str, *, required: bool) -> str | None:
    value = table.get(key)
    if value is None:
        if required:
            raise _error(path, locator, dotted.rsplit(".", 1)[0] if "." in dotted else dotted,
                         f"is missing the key '{key}'")
        return None
    if not isinstance(value, str) or not value.strip():
        raise _error(path, locator, dotted, f"must be a non-empty string, got {value!r}")
    return value


def _required(path, locator, table: dict, key: str, dotted: str) -> str:
    value = _string(path, locator, table, key, dotted, required=True)
    assert value is not None  # _string raises for a missing required key
    return value


def _options(path, locator, table: dict, dotted: str) -> dict[str, str]:
    options = table.get("options", {})
    if not isinstance(options, dict):
        raise _error(path, locator, f"{dotted}.options", "must be a table of option = value")
    flat = _flatten(options)
    bad = [k for k, v in flat.items() if isinstance(v, list)]
    if bad:
        raise _error(path, locator, f"{dotted}.options", f"option '{bad[0]}' must be a string, number or boolean")
    return {k: (str(v).lower() if isinstance(v, bool) else str(v)) for k, v in flat.items()}


def _flatten(options: dict, prefix: str = "") -> dict:
    """Option keys as sparklink spells them: TOML reads an unquoted dotted key
    (``compaction.everyNCheckpoints = 2``) as a nested table, which is the option
    ``compaction.everyNCheckpoints``."""
    flat: dict = {}
    for key, value in options.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat


def _reject_unknown(path, locator, table: dict, dotted: str, known: tuple[str, ...]) -> None:
    for key in table:
        if key not in known:
            raise _error(path, locator, f"{dotted}.{key}" if dotted else key,
                         f"unknown key (accepted: {', '.join(known)})")


def load_pipeline(path: str | Path) -> PipelineSpec:
    """Parse and check a pipeline file; relative paths in options stay as written."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise PipelineError(path, "file", None, f"cannot be read: {exc.strerror}") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        match = re.search(r"line (\d+)", str(exc))
        raise PipelineError(path, "syntax", int(match.group(1)) if match else None, str(exc)) from None
    locator = _Locator(text)
    _reject_unknown(path, locator, data, "", ("spark", "sources", "transform", "sinks", "trigger"))

    spark = data.get("spark", {})
    _reject_unknown(path, locator, spark, "spark", ("master", "app_name", "conf"))
    conf = spark.get("conf", {})
    if not isinstance(conf, dict):
        raise _error(path, locator, "spark.conf", "must be a table of setting = value")

    sources_table = data.get("sources")
    if not isinstance(sources_table, dict) or not sources_table:
        raise PipelineError(path, "sources", locator.line_of("sources"), "at least one [sources.<name>] table is required")
    sources = []
    for name, table in sources_table.items():
        dotted = f"sources.{name}"
        if not isinstance(table, dict):
            raise _error(path, locator, dotted, "must be a table")
        if not _NAME.match(name):
            raise _error(path, locator, dotted, "the source name must be a SQL identifier (letters, digits, _)")
        _reject_unknown(path, locator, table, dotted, ("format", "schema", "options"))
        sources.append(SourceSpec(name=name, format=_required(path, locator, table, "format", f"{dotted}.format"),
                                  schema=_string(path, locator, table, "schema", f"{dotted}.schema", required=False),
                                  options=_options(path, locator, table, dotted)))

    transform = data.get("transform", {})
    _reject_unknown(path, locator, transform, "transform", ("sql",))
    sql = _string(path, locator, transform, "sql", "transform.sql", required=False)
    if sql is None and len(sources) > 1:
        raise PipelineError(path, "transform.sql", None, "is required when there is more than one source")

    sinks_list = data.get("sinks")
    if not isinstance(sinks_list, list) or not sinks_list:
        raise PipelineError(path, "sinks", locator.line_of("sinks"), "at least one [[sinks]] table is required")
    sinks, names = [], set()
    for index, table in enumerate(sinks_list):
        dotted = "sinks"
        _reject_unknown(path, locator, table, dotted, ("name", "format", "checkpoint", "options"))
        name = _string(path, locator, table, "name", f"{dotted}.name", required=False) or f"sink{index}"
        if name in names:
            raise _error(path, locator, f"{dotted}.name", f"two sinks are named '{name}'")
        names.add(name)
        sinks.append(SinkSpec(name=name, format=_required(path, locator, table, "format", f"{dotted}.format"),
                              checkpoint=_required(path, locator, table, "checkpoint", f"{dotted}.checkpoint"),
                              options=_options(path, locator, table, dotted)))

    trigger = data.get("trigger", {})
    _reject_unknown(path, locator, trigger, "trigger", ("mode", "interval"))
    mode = trigger.get("mode", "availableNow")
    if mode not in TRIGGER_MODES:
        raise _error(path, locator, "trigger.mode", f"unknown value '{mode}' (accepted: {', '.join(TRIGGER_MODES)})")
    interval = _string(path, locator, trigger, "interval", "trigger.interval", required=mode == "processingTime")
    return PipelineSpec(path=path, master=spark.get("master"), app_name=spark.get("app_name", path.stem),
                        spark_conf={k: str(v) for k, v in conf.items()}, sources=sources, sql=sql, sinks=sinks,
                        trigger_mode=mode, trigger_interval=interval)
