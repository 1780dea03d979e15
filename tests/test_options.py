"""Option parsing: sizes, durations, booleans, choices, and errors that name the option."""

import pytest

from sparklink.errors import ConfigError
from sparklink.options import Options, parse_bool, parse_choice, parse_duration, parse_int, parse_size


@pytest.mark.parametrize(("text", "expected"), [
    ("128MB", 128 * 1024**2), ("64mb", 64 * 1024**2), ("1GB", 1024**3), ("10", 10), ("1.5KB", 1536), (" 2 kb ", 2048),
], ids=["MB", "lower-mb", "GB", "bare-bytes", "fraction", "spaces"])
def test_parse_size(text, expected):
    assert parse_size("maxPartSize", text) == expected


@pytest.mark.parametrize(("text", "expected"), [
    ("15min", 900.0), ("5 min", 300.0), ("30s", 30.0), ("250ms", 0.25), ("2h", 7200.0), ("1d", 86400.0), ("7", 7.0),
], ids=["min", "min-space", "s", "ms", "h", "d", "bare-seconds"])
def test_parse_duration(text, expected):
    assert parse_duration("rolloverInterval", text) == expected


@pytest.mark.parametrize(("parser", "text", "message"), [
    (parse_size, "12 parsecs", r"option 'maxPartSize': '12 parsecs' is not a size"),
    (parse_duration, "soon", r"option 'maxPartSize': 'soon' is not a duration"),
    (parse_bool, "maybe", r"option 'maxPartSize': 'maybe' is not a boolean \(accepted: true, false\)"),
    (parse_int, "ten", r"option 'maxPartSize': 'ten' is not an integer"),
], ids=["size", "duration", "bool", "int"])
def test_bad_values_name_the_option(parser, text, message):
    with pytest.raises(ConfigError, match=message):
        parser("maxPartSize", text)


def test_parse_int_minimum_and_choice():
    with pytest.raises(ConfigError, match="must be at least 1, got 0"):
        parse_int("numSplits", "0", minimum=1)
    assert parse_choice("format", "PARQUET", ["json", "parquet"]) == "parquet"
    with pytest.raises(ConfigError, match=r"unknown value 'xml' \(accepted: json, parquet\)"):
        parse_choice("format", "xml", ["json", "parquet"])


def test_options_are_case_insensitive_and_reject_unknown_keys():
    opts = Options({"checkpointlocation": "/ck", "maxPartSize": "1MB"})
    assert opts["checkpointLocation"] == "/ck" and "MAXPARTSIZE" in opts
    assert opts.require("maxpartsize") == "1MB"
    with pytest.raises(ConfigError, match="option 'path': is required"):
        opts.require("path")
    with pytest.raises(ConfigError, match=r"option 'maxPartSize': unknown option \(accepted: checkpointLocation\)"):
        opts.reject_unknown(["checkpointLocation"])


def test_options_spark_adds_are_never_unknown():
    """Spark hands a sink its query's name and checkpoint as options."""
    Options({"queryname": "q", "checkpointlocation": "/ck", "path": "/o"}).reject_unknown(["path"])


def test_option_table_declares_parses_and_refuses():
    """One table: case-insensitive look-up, typed values and defaults, unknown keys with a
    did-you-mean, options given where they do not apply, shared options inherited."""
    from sparklink.options import BOOL, SIZE, Option, OptionTable, applies_to_option, choice

    class Shared(OptionTable):
        group = "shared settings"
        retries = Option("retries", BOOL, default=False, doc="retry")

    class Table(Shared):
        passthrough_prefixes = ("client.",)
        format = Option("format", choice("csv", "json"), default="json", doc="the format")
        header = Option("header", BOOL, default=False, applies=applies_to_option("format", "csv"), doc="a header")
        part_size = Option("partSize", SIZE, doc="a size", aliases=("ps",))

    assert [s.key for s in Table.specs()] == ["format", "header", "partSize", "retries"]
    assert Table.lookup("PARTSIZE") is Table.part_size and Table.lookup("ps") is Table.part_size
    opts = Table.options({"FORMAT": "CSV", "ps": "1KB", "client.id": "x", "checkpointLocation": "/ck"})
    assert Table.format.value(opts) == "csv" and Table.part_size.get(opts) == 1024
    assert Table.header.value(opts) is False and Table.retries.get(opts) is False
    with pytest.raises(ConfigError, match=r"option 'partSise': unknown option \(did you mean 'partSize'\?\)"):
        Table.options({"partSise": "1"})
    json_opts = Table.options({"format": "json", "header": "true"})
    with pytest.raises(ConfigError, match=r"option 'header': applies to format 'csv', not 'json'"):
        Table.check_applies(json_opts, "format", Table.format.value(json_opts))
    assert list(Table.groups()) == ["shared settings"]
