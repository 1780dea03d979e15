"""Registration of the ``sparklink.delta`` format (the sink), found by ``sparklink.register``."""

from __future__ import annotations


def data_sources() -> list[type]:
    from sparklink.delta.sink import DeltaSink
    from sparklink.delta.source import DeltaSource
    from sparklink.spark import as_data_source

    return [as_data_source(DeltaSource, "sparklink.delta", sink=DeltaSink)]
