"""The published exactly-once conformance suite: abstract pytest classes to subclass for a
connector (see docs/sdk.md), and the helpers their checks use. Load the harness's fixtures with
``pytest_plugins = ["sparklink.testing.fixtures"]`` in a ``conftest.py``."""

from sparklink.testing.conformance.outputs import (
                                                   SEQUENCE_SCHEMA,
                                                   hidden_data_files,
                                                   plain_reader_ids,
                                                   plain_reader_json_ids,
)
from sparklink.testing.conformance.sinks import SinkConformance, write_attempt
from sparklink.testing.conformance.sources import SourceConformance

__all__ = ["SEQUENCE_SCHEMA", "SinkConformance", "SourceConformance", "hidden_data_files", "plain_reader_ids",
           "plain_reader_json_ids", "write_attempt"]
