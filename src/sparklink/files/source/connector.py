"""Placeholder until the file source lands (issue 5): reading ``sparklink.files`` is refused."""

from __future__ import annotations

from sparklink.errors import ConfigError


class FileSourceConnector:
    def __init__(self, options):
        raise ConfigError("format", "reading 'sparklink.files' is not implemented yet")
