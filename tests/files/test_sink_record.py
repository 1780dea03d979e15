"""The file sink's record ``_sparklink/sink.json`` (read by ``sparklink.files.finish``) and the S3
settings a finish takes: unit tests on a local directory through the storage seam (no Spark)."""

from __future__ import annotations

import json

import pytest
from pyspark.sql.types import LongType, StructField, StructType

from sparklink.errors import ConfigError
from sparklink.files.sink.finish import output_meta
from sparklink.files.sink.recovery import RECORD_VERSION, SINK_RECORD, read_record, record_sink, recorded_retention
from sparklink.storage import LocalStorage
from sparklink.storage.directory import StorageDirectory

SCHEMA = StructType([StructField("id", LongType())])


def test_the_record_round_trips_without_credentials_and_is_written_only_when_it_changed(tmp_path):
    meta = StorageDirectory(LocalStorage(tmp_path), "_sparklink")
    options = {"path": "s3://b/out", "format": "json", "fileRetention": "2h", "s3.endpoint": "http://h:1",
               "s3.accessKeyId": "AKIA", "s3.secretAccessKey": "secret", "s3.sessionToken": "token",
               "checkpointLocation": "/ck"}
    record_sink(meta, options, SCHEMA.json())
    record = read_record(meta)
    assert record == {"v": RECORD_VERSION, "schema": json.loads(SCHEMA.json()),
                      "options": {"fileRetention": "2h", "format": "json", "s3.endpoint": "http://h:1"}}
    assert StructType.fromJson(record["schema"]) == SCHEMA
    assert recorded_retention(meta) == 7200.0
    version = meta.read(SINK_RECORD).version
    record_sink(meta, options, SCHEMA.json())  # unchanged: not written again
    assert meta.read(SINK_RECORD).version == version


def test_finish_takes_only_s3_settings_and_only_for_s3_paths(tmp_path):
    with pytest.raises(ConfigError, match="option 'format': is not an S3 setting"):
        output_meta("s3://bucket/out", {"format": "json"})
    with pytest.raises(ConfigError, match="option 's3.endpoint': applies to s3:// and s3a:// paths"):
        output_meta(str(tmp_path), {"s3.endpoint": "http://h:1"})
    path, meta = output_meta(f"file://{tmp_path}")
    assert path == str(tmp_path) and meta.local_path() == tmp_path / "_sparklink"
