"""Placeholder until the file sink lands (issue 3): writing ``sparklink.files`` is refused."""

from __future__ import annotations

from sparklink.errors import ConfigError


class FileSinkConnector:
    def __init__(self, options, schema):
        raise ConfigError("format", "writing 'sparklink.files' is not implemented yet")
