"""Options: parsing of string values and the declaration of each connector's options (driver side,
at query start).

Spark hands every option over as a string. The ``parse_*`` helpers turn them into typed values
and raise :class:`~sparklink.errors.ConfigError` naming the option when a value is malformed.
Option maps from Spark are case-insensitive; :class:`Options` mirrors that.

Each connector declares its options once, as an :class:`OptionTable` of :class:`Option` specs
(key, parser, default, where it applies, one line of doc; Flink's ``ConfigOption``). The table
refuses unknown options with a did-you-mean, refuses an option given where it does not apply,
hands typed values to the connector's ``from_options``, and is what the option tables in
``docs/`` are generated from (:mod:`sparklink.options_doc`).
"""

from __future__ import annotations

import dataclasses
import difflib
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import KW_ONLY, dataclass
from typing import Any, ClassVar, Generic, TypeVar

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


# ---------------------------------------------------------------------------------------------
# Option specs and tables
# ---------------------------------------------------------------------------------------------

T = TypeVar("T")


@dataclass(frozen=True)
class Parser(Generic[T]):
    """Turns an option's string into a value (``parse(key, text)``); ``doc`` says which values
    it takes, for the generated docs."""

    parse: Callable[[str, str], T]
    doc: str

    def __call__(self, key: str, text: str) -> T:
        return self.parse(key, text)


def _text(key: str, value: str) -> str:
    return value


def _non_empty(key: str, value: str) -> str:
    if not value.strip():
        raise ConfigError(key, "must not be empty")
    return value


TEXT: Parser[str] = Parser(_text, "text")
NON_EMPTY: Parser[str] = Parser(_non_empty, "text")
SIZE: Parser[int] = Parser(parse_size, "size")
DURATION: Parser[float] = Parser(parse_duration, "duration")
BOOL: Parser[bool] = Parser(parse_bool, "`true`, `false`")


def integer(minimum: int | None = None) -> Parser[int]:
    """An integer, at least ``minimum`` when given."""
    return Parser(lambda key, value: parse_int(key, value, minimum=minimum),
                  "integer" if minimum is None else f"integer >= {minimum}")


def choice(*choices: str) -> Parser[str]:
    """One of ``choices`` (any case; the value is given in the spelling of ``choices``)."""
    return Parser(lambda key, value: parse_choice(key, value, choices), ", ".join(f"`{c}`" for c in choices))


def string(doc: str) -> Parser[str]:
    """Any text, kept as given; ``doc`` says what it holds (the connector checks it further)."""
    return Parser(_text, doc)


def custom(parse: Callable[[str, str], T], doc: str) -> Parser[T]:
    """A connector's own parser (``parse(key, text)`` raising ConfigError)."""
    return Parser(parse, doc)


@dataclass(frozen=True)
class Applies:
    """Where an option applies: when ``selector`` (another option of the table, or a fact the
    connector knows such as the query's mode or the kind of path) is one of ``values``.
    ``refusal`` is the message when it is given elsewhere (``{actual}`` is the selector's value);
    ``doc`` is the docs' "applies to" text."""

    selector: str
    values: tuple[str, ...]
    refusal: str
    doc: str
    accepted: str | None = None  # the "(accepted: ...)" part of the refusal, if any


def applies_to_option(selector: str, *values: str, doc: str | None = None) -> Applies:
    """Applies when the option ``selector`` has one of ``values``: refused otherwise with
    ``applies to <selector> 'v', not '<actual>'`` (``formats a, b`` for the format option)."""
    if selector == "format":
        label = f"format '{values[0]}'" if len(values) == 1 else "formats " + ", ".join(values)
    else:
        label = f"{selector} " + ", ".join(f"'{v}'" for v in values)
    return Applies(selector, values, f"applies to {label}, not '{{actual}}'",
                   doc or f"`{selector}` " + ", ".join(f"`{v}`" for v in values))


@dataclass(frozen=True)
class Option(Generic[T]):
    """One option: its key (as documented; looked up case-insensitively), how its text is
    parsed, its default (None: unset), where it applies and one line of doc. ``default_doc``
    writes a default the docs cannot show as a value (``"the AWS chain"``); ``builder`` names the
    builder call that sets it; ``example`` is a value for the docs' example column."""

    key: str
    parser: Parser[T]
    _: KW_ONLY
    doc: str
    default: T | None = None
    default_doc: str | None = None
    applies: Applies | None = None
    required: bool = False
    builder: str | None = None
    example: str | None = None
    aliases: tuple[str, ...] = ()
    secret: bool = False

    def __str__(self) -> str:
        return self.key

    def parse(self, text: str) -> T:
        return self.parser(self.key, text)

    def raw(self, options: Options) -> str | None:
        """The text given for this option (or one of its aliases), None when absent."""
        for key in (self.key, *self.aliases):
            if key in options:
                return options[key]
        return None

    def given(self, options: Options) -> bool:
        return self.raw(options) is not None

    def get(self, options: Options) -> T | None:
        """The parsed value, the default when absent (None without one)."""
        text = self.raw(options)
        if text is None:
            return self.default
        return self.parse(text)

    def value(self, options: Options) -> T:
        """The parsed value or the default; absent without a default: "is required"."""
        if self.required:
            options.require(self.key)
        result = self.get(options)
        if result is None:
            raise ConfigError(self.key, "is required")
        return result

    def inapplicable(self, actual: str) -> ConfigError:
        """The error for this option given where :attr:`applies` does not hold (``actual``: what
        the selector is instead)."""
        if self.applies is None:
            raise TypeError(f"option {self.key} applies everywhere")
        return ConfigError(self.key, self.applies.refusal.format(actual=actual), self.applies.accepted)

    def check_applies(self, options: Options, actual: str) -> None:
        """Refuse this option if it is given while its selector is ``actual`` and it does not apply there."""
        if self.applies is not None and actual not in self.applies.values and self.given(options):
            raise self.inapplicable(actual)

    def documented(self, doc: str, *, default_doc: str | None = None) -> "Option[T]":
        """The same option (key, parser, default) with the doc a connector gives it (a shared
        option such as ``checkpointLocation`` means more for some connectors)."""
        return dataclasses.replace(self, doc=doc, default_doc=default_doc if default_doc is not None else self.default_doc)

    def default_text(self) -> str:
        """The default as the docs show it."""
        if self.default_doc is not None:
            return self.default_doc
        if self.required:
            return "required"
        if self.default is None:
            return "none"
        if isinstance(self.default, bool):
            return f"`{str(self.default).lower()}`"
        return f"`{self.default}`"


class OptionTable:
    """A connector's options: subclass and declare each :class:`Option` as a class attribute.
    A subclass inherits its bases' options (shared ones such as the S3 settings), less the keys
    in ``exclude``; the options of a base that names a ``group`` (options every connector of a
    kind shares, documented once elsewhere) come last and are one row in the generated docs.
    Options whose key starts with one of ``passthrough_prefixes`` (``kafka.*`` handed to the
    client) and the keys in ``ignored`` are accepted without a spec; those Spark adds itself
    (:class:`SparkOptions`) are never unknown."""

    group: ClassVar[str] = ""  # set by a table of shared options: their one docs row says this
    group_default: ClassVar[str] = ""
    passthrough_prefixes: ClassVar[tuple[str, ...]] = ()
    ignored: ClassVar[tuple[str, ...]] = ()
    exclude: ClassVar[tuple[str, ...]] = ()
    passthrough_doc: ClassVar[tuple[tuple[str, str], ...]] = ()  # docs rows for passthrough keys: (pattern, doc)
    _specs: ClassVar[tuple[Option[Any], ...]] = ()
    _by_lower: ClassVar[dict[str, Option[Any]]] = {}
    _groups: ClassVar[dict[str, tuple[str, tuple[Option[Any], ...]]]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        own: dict[str, Option[Any]] = {}
        shared: dict[str, Option[Any]] = {}
        groups: dict[str, tuple[str, list[Option[Any]]]] = {}
        excluded = {key.lower() for key in cls.exclude}
        own_group = vars(cls).get("group", "")
        for base in reversed(cls.__mro__):
            group = vars(base).get("group", "")
            group = "" if group == own_group else group
            for value in vars(base).values():
                if isinstance(value, Option) and value.key.lower() not in excluded:
                    own.pop(value.key.lower(), None)
                    shared.pop(value.key.lower(), None)
                    (shared if group else own)[value.key.lower()] = value
                    if group:
                        groups.setdefault(group, (vars(base).get("group_default", ""), []))[1].append(value)
        cls._specs = (*own.values(), *shared.values())
        # a key a table declares itself (e.g. PostgreSQL's own keyColumns) leaves the shared group's row
        cls._groups = {text: (default, tuple(s for s in specs if s.key.lower() not in own))
                       for text, (default, specs) in groups.items()}
        cls._by_lower = {}
        for spec in cls._specs:
            for key in (spec.key, *spec.aliases):
                cls._by_lower[key.lower()] = spec

    @classmethod
    def groups(cls) -> dict[str, tuple[str, tuple[Option[Any], ...]]]:
        """The shared options this table includes: group text -> (default text, specs)."""
        return cls._groups

    @classmethod
    def specs(cls) -> tuple[Option[Any], ...]:
        return cls._specs

    @classmethod
    def keys(cls) -> tuple[str, ...]:
        """Every key the table accepts (aliases included), in declaration order."""
        return tuple(key for spec in cls._specs for key in (spec.key, *spec.aliases))

    @classmethod
    def lookup(cls, key: str) -> Option[Any] | None:
        """The spec of ``key`` (any case, aliases too), None for an unknown key."""
        return cls._by_lower.get(key.lower())

    @classmethod
    def options(cls, raw: Mapping[str, Any] | Options | None) -> Options:
        """``raw`` as case-insensitive :class:`Options`, unknown keys refused."""
        options = raw if isinstance(raw, Options) else Options(raw)
        passthrough = [key for key in options if key.lower().startswith(tuple(p.lower() for p in cls.passthrough_prefixes))]
        options.reject_unknown(cls.keys(), ignore=(*cls.ignored, *passthrough))
        return options

    @classmethod
    def check_applies(cls, options: Options, selector: str, actual: str, *, shown: str | None = None) -> None:
        """Refuse any given option that applies only where ``selector`` is something other than
        ``actual`` (``shown``: how the message names ``actual``, default ``actual``)."""
        for spec in cls._specs:
            rule = spec.applies
            if rule is not None and rule.selector == selector and actual not in rule.values and spec.given(options):
                raise spec.inapplicable(shown if shown is not None else actual)


class SparkOptions(OptionTable):
    """Options Spark itself adds to a streaming query's options (from ``.option("checkpointLocation",
    ...)`` or the session's default, and ``.queryName(...)``): never a connector's, never unknown.
    Connectors that use one include it in their table (``checkpoint_location``)."""

    checkpoint_location = Option("checkpointLocation", TEXT, doc="the query's checkpoint directory (Spark's own "
                                 "option)", default_doc="Spark's")
    query_name = Option("queryName", TEXT, doc="the query's name (from `.queryName(...)`)", default_doc="Spark's")


SPARK_PROVIDED_OPTIONS = SparkOptions.keys()
CHECKPOINT_LOCATION = SparkOptions.checkpoint_location


def checkpoint_location(options: Mapping[str, str]) -> str | None:
    """The ``checkpointLocation`` among ``options`` (any case), None without one."""
    return next((v for k, v in options.items() if k.lower() == CHECKPOINT_LOCATION.key.lower()), None)
