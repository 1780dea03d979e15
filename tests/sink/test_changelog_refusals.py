"""Sinks without keys refuse ``writeMode=upsert`` before anything is written, naming the sinks
that serve it (no Spark: the option tables and the sink constructors)."""

import pytest
from pyspark.sql.types import LongType, StructField, StructType

from sparklink.errors import ConfigError
from sparklink.examples.directory_sink import DirectorySink
from sparklink.files.sink.options import FileSinkOptions


def test_the_file_sink_refuses_upsert_and_accepts_append():
    assert FileSinkOptions.options({"path": "/x", "writeMode": "append"})
    with pytest.raises(ConfigError, match=r"writeMode.*'upsert' is not served by sparklink.files.*"
                                          r"sparklink.delta, sparklink.iceberg"):
        FileSinkOptions.options({"path": "/x", "WRITEMODE": "upsert", "keyColumns": "id"})


def test_the_directory_example_sink_refuses_upsert(tmp_path):
    schema = StructType([StructField("id", LongType())])
    with pytest.raises(ConfigError, match=r"not served by sparklink.directory.*sparklink.delta"):
        DirectorySink({"path": str(tmp_path), "writeMode": "upsert"}, schema)
    assert not any(tmp_path.iterdir())
