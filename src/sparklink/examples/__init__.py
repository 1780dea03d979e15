"""Example connectors built on the SDK, used by the tests and the README.

* ``sparklink.sequence``: a source of ``numSplits`` splits, each ``rowsPerSplit`` ids long.
* ``sparklink.directory``: a transactional directory sink writing Parquet files.
"""

from __future__ import annotations

from sparklink.contract import ConnectorSpec, FormatSpec, OptionsDoc

#: The connector contract (ARCHITECTURE.md, "Adding a connector"): read by sparklink.connectors.
CONNECTOR = ConnectorSpec(
    package="examples",
    formats=(
        FormatSpec(name="sparklink.sequence", source="sparklink.examples.sequence_source:SequenceSource",
                   source_options=OptionsDoc("sparklink.examples.sequence_source:SequenceOptions")),
        FormatSpec(name="sparklink.directory", sink="sparklink.examples.directory_sink:DirectorySink",
                   sink_options=OptionsDoc("sparklink.examples.directory_sink:DirectoryOptions")),
    ),
)
