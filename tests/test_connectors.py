"""The connector contract (sparklink.contract, sparklink.connectors): the one list of connectors
is complete and consistent, and every source and sink on it refuses an unknown option with a
did-you-mean. Spark-free: no JVM, no server (each refusal comes before any connection)."""

from __future__ import annotations

import pkgutil
from pathlib import Path

import pytest
from pyspark.sql.types import LongType, StringType, StructField, StructType

import sparklink
from sparklink.connectors import CONNECTORS, end_of_input_actions, format_named, formats
from sparklink.contract import FormatSpec, resolve
from sparklink.errors import ConfigError
from sparklink.options import OptionTable
from sparklink.sink.sink import Sink
from sparklink.source.source import Source

PACKAGE_DIR = Path(sparklink.__file__).parent
SCHEMA = StructType([StructField("id", LongType()), StructField("value", StringType())])
#: Options a connector checks before it looks for unknown keys (its client settings), so that
#: the misspelt key is what is refused.
BASE_OPTIONS = {"sparklink.kafka": {"kafka.bootstrap.servers": "127.0.0.1:9"}}


def test_every_connector_package_is_on_the_list():
    """A package of sparklink that declares a CONNECTOR but is missing from the list (or listed
    twice) cannot be registered, documented or checked: refused here."""
    declaring = {info.name for info in pkgutil.iter_modules([str(PACKAGE_DIR)]) if info.ispkg
                 and hasattr(__import__(f"sparklink.{info.name}", fromlist=["_"]), "CONNECTOR")}
    listed = [connector.package for connector in CONNECTORS]
    assert len(listed) == len(set(listed)), f"a connector is listed twice: {listed}"
    assert declaring == set(listed), f"declared but not listed: {declaring - set(listed)}; listed but not declaring: " \
                                     f"{set(listed) - declaring} (sparklink/connectors.py)"
    for connector in CONNECTORS:
        assert resolve(f"sparklink.{connector.package}:CONNECTOR") is connector


def test_every_reference_resolves():
    names = [spec.name for spec in formats()]
    assert len(names) == len(set(names)), f"a format is declared twice: {names}"
    for spec in formats():
        assert spec.name.startswith("sparklink."), spec.name
        if spec.source is not None:
            source = resolve(spec.source)
            assert callable(source) and (not isinstance(source, type) or issubclass(source, Source)), spec.source
        if spec.sink is not None:
            sink = resolve(spec.sink)
            assert callable(sink) and (not isinstance(sink, type) or issubclass(sink, Sink)), spec.sink
            assert callable(_sink_check(spec)), spec.name
        for side in (spec.source_options, spec.sink_options):
            if side is not None:
                table = resolve(side.table)
                assert isinstance(table, type) and issubclass(table, OptionTable) and table.specs(), side.table
    for kind, ref in end_of_input_actions().items():
        assert callable(resolve(ref)), f"end-of-input action {kind}: {ref}"


def test_registration_serves_the_list():
    """``sparklink.register`` registers exactly the listed formats (and the end of input's own
    data source), each with the source and sink its contract names."""
    classes = {cls.name(): cls for cls in sparklink.data_sources()}
    assert set(classes) == {spec.name for spec in formats()} | {"sparklink.endOfInput"}
    for spec in formats():
        cls = classes[spec.name]
        # held by reference (LazyFactory), so that a query's planning process imports only its side
        source, sink = cls.sparklink_source, cls.sparklink_sink
        assert (source.resolve() if source else None) is (resolve(spec.source) if spec.source else None), spec.name
        assert (sink.resolve() if sink else None) is (resolve(spec.sink) if spec.sink else None), spec.name
    assert format_named("sparklink.nope") is None


def _sink_check(spec: FormatSpec):
    assert spec.sink is not None
    return resolve(spec.sink_check) if spec.sink_check else resolve(spec.sink).validate


def _misspelt(table: type[OptionTable]) -> tuple[str, str]:
    """The table's longest key (not a pass-through one) and that key with two letters swapped."""
    prefixes = tuple(p.lower() for p in table.passthrough_prefixes)
    key = max((k for k in table.keys() if not k.lower().startswith(prefixes)), key=len)
    middle = len(key) // 2
    return key, key[:middle] + key[middle + 1] + key[middle] + key[middle + 2:]


SIDES = [pytest.param(spec, side, id=f"{spec.name}-{side}") for spec in formats()
         for side in ("source", "sink") if getattr(spec, side) is not None]


@pytest.mark.parametrize(("spec", "side"), SIDES)
def test_an_unknown_option_is_refused_with_a_did_you_mean(spec: FormatSpec, side: str):
    """Every source and sink builds its config through its option table: a misspelt key fails
    at the query's start (the factory Spark's adapter calls) and in ``sparklink run --check``
    (the sink's declared check), naming the key it meant; nothing is silently ignored."""
    declared = spec.source_options if side == "source" else spec.sink_options
    assert declared is not None
    key, wrong = _misspelt(resolve(declared.table))
    options = {**BASE_OPTIONS.get(spec.name, {}), wrong: "x"}
    factory = resolve(getattr(spec, side))
    builds = [lambda: factory(options)] if side == "source" else [lambda: factory(options, SCHEMA),
                                                                  lambda: _sink_check(spec)(options, SCHEMA)]
    for build in builds:
        with pytest.raises(ConfigError) as refused:
            build()
        assert f"'{wrong}'" in str(refused.value) and f"did you mean '{key}'?" in str(refused.value), str(refused.value)
