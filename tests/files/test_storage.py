"""The file-I/O seam (sparklink.storage): one contract, served by the local file system and
by a real S3 server (SeaweedFS, started once per test run by the ``s3_server`` fixture); S3's
multipart uploads; the start-up check that refuses a store ignoring conditional writes; S3
settings from options and from the AWS environment, secrets never shown."""

from __future__ import annotations

import pickle
import uuid

import pytest

from sparklink.errors import ConfigError, StorageError
from sparklink.storage import (LocalLocation, LocalStorage, S3Config, S3Location, open_storage, parse_location,
                                     without_secrets)
from sparklink.storage.s3 import MIN_PART_SIZE, S3Storage, UploadedPart, multipart_etag


@pytest.fixture(params=["local", "s3"])
def storage(request, tmp_path):
    """The same contract on both sides of the seam."""
    if request.param == "local":
        return LocalStorage(tmp_path / "out")
    server = request.getfixturevalue("s3_server")
    bucket = request.getfixturevalue("s3_bucket")
    return S3Storage(S3Location(scheme="s3", bucket=bucket, prefix="out/data"), S3Config.from_options(server.options()))


@pytest.fixture
def s3(s3_server, s3_bucket) -> S3Storage:
    return S3Storage(S3Location(scheme="s3a", bucket=s3_bucket, prefix="tbl"), S3Config.from_options(s3_server.options()))


# ---------------------------------------------------------------------------------------- locations

@pytest.mark.parametrize("path, expected", [
    ("s3://acc/out", S3Location(scheme="s3", bucket="acc", prefix="out")),
    ("s3a://my.bucket/a/b/", S3Location(scheme="s3a", bucket="my.bucket", prefix="a/b")),
    ("S3://acc", S3Location(scheme="s3", bucket="acc", prefix="")),
    ("/data/out", LocalLocation(path="/data/out")),
    ("file:///data/out", LocalLocation(path="/data/out")),
    ("out/x", LocalLocation(path="out/x")),
], ids=["s3", "s3a-trailing-slash", "upper-case-bucket-root", "local", "file-uri", "relative"])
def test_served_paths_parse_into_locations(path, expected):
    assert parse_location("path", path) == expected


@pytest.mark.parametrize("path, problem", [
    ("hdfs://nn:8020/out", "scheme 'hdfs://' is not served"),
    ("gs://bucket/out", "scheme 'gs://' is not served"),
    ("s3://ab/out", "does not name an S3 bucket"),
    ("s3://Upper/out", "does not name an S3 bucket"),
    ("s3:///out", "does not name an S3 bucket"),
    ("s3://acc//out", "empty, '.' or '..' segment"),
    ("s3a://acc/a/../b", "empty, '.' or '..' segment"),
], ids=["hdfs", "gs", "short-bucket", "upper-case-bucket", "no-bucket", "empty-segment", "dot-dot"])
def test_other_schemes_and_bad_s3_paths_are_refused_naming_the_problem(path, problem):
    with pytest.raises(ConfigError, match=problem) as refused:
        parse_location("path", path)
    assert "option 'path'" in str(refused.value)
    if "not served" in problem:
        assert "file://, s3://, s3a://" in str(refused.value)


# ---------------------------------------------------------------------------------------- settings

def test_s3_settings_from_options_never_show_the_secret():
    config = S3Config.from_options({"s3.endpoint": "http://127.0.0.1:9", "s3.accessKeyId": "AKIDEXAMPLE",
                                    "s3.secretAccessKey": "wJalr-very-secret", "s3.sessionToken": "tok-secret",
                                    "s3.pathStyleAccess": "true"})
    assert config.path_style_access and config.endpoint == "http://127.0.0.1:9"
    for shown in (repr(config), config.describe()):
        assert "very-secret" not in shown and "tok-secret" not in shown
    assert "AKIDEXAMPLE" in config.describe() and "http://127.0.0.1:9" in config.describe()
    assert without_secrets({"path": "s3://a/b", "s3.secretAccessKey": "x", "S3.SESSIONTOKEN": "y"}) == \
        {"path": "s3://a/b", "s3.secretAccessKey": "***", "S3.SESSIONTOKEN": "***"}
    assert pickle.loads(pickle.dumps(config)) == config  # travels to executors with the sink


@pytest.mark.parametrize("options, option", [
    ({"s3.accessKeyId": "AKID"}, "s3.secretAccessKey"),
    ({"s3.secretAccessKey": "x"}, "s3.accessKeyId"),
    ({"s3.endpoint": "127.0.0.1:9000"}, "s3.endpoint"),
    ({"s3.pathStyleAccess": "maybe"}, "s3.pathStyleAccess"),
], ids=["key-without-secret", "secret-without-key", "endpoint-without-scheme", "bad-boolean"])
def test_bad_s3_settings_are_refused_naming_the_option(options, option):
    with pytest.raises(ConfigError, match=f"option '{option}'"):
        S3Config.from_options(options)


def test_s3_settings_come_from_the_standard_aws_environment(s3_server, s3_bucket, monkeypatch):
    for name, value in s3_server.environment().items():
        monkeypatch.setenv(name, value)
    storage = open_storage(parse_location("path", f"s3://{s3_bucket}/env"), {})
    assert storage.create_if_absent("a.json", b"{}") is not None
    assert [o.key for o in storage.list()] == ["a.json"]
    assert s3_server.endpoint in storage.describe()


def test_wrong_credentials_are_refused_without_showing_the_secret(s3_server, s3_bucket):
    options = {**s3_server.options(), "s3.secretAccessKey": "not-the-right-secret-42"}
    storage = open_storage(parse_location("path", f"s3://{s3_bucket}/x"), options)
    with pytest.raises(StorageError) as refused:
        storage.put("a", b"1")
    message = str(refused.value)
    assert s3_server.endpoint in message and f"s3://{s3_bucket}/x/a" in message
    assert "not-the-right-secret-42" not in message and s3_server.secret_access_key not in message


# ---------------------------------------------------------------------------------------- the contract

def test_create_if_absent_creates_once(storage):
    first = storage.create_if_absent("_sparklink/commits/0.json", b'{"a": 1}')
    assert first is not None
    assert storage.create_if_absent("_sparklink/commits/0.json", b'{"a": 2}') is None
    stored = storage.read("_sparklink/commits/0.json")
    assert stored.data == b'{"a": 1}' and stored.version == first


def test_replace_only_the_version_that_was_read(storage):
    version = storage.create_if_absent("owner.json", b"one")
    newer = storage.replace("owner.json", b"two", expected_version=version)
    assert newer is not None and newer != version
    assert storage.replace("owner.json", b"three", expected_version=version) is None  # stale version
    assert storage.read("owner.json").data == b"two"
    assert storage.replace("missing.json", b"x", expected_version=version) is None


def test_read_info_and_delete_of_a_missing_object(storage):
    assert storage.read("nothing") is None and storage.info("nothing") is None
    storage.delete("nothing")
    storage.put("dir/x", b"12345")
    info = storage.info("dir/x")
    assert info.size == 5 and info.modified_at > 0
    storage.delete("dir/x")
    assert storage.info("dir/x") is None


def test_list_is_recursive_sorted_and_starts_after_a_key(storage):
    keys = ["b/2", "a/1", "a/10", "b/1/x", "c"]
    for key in keys:
        storage.put(key, key.encode())
    assert [o.key for o in storage.list()] == sorted(keys)
    assert [o.key for o in storage.list("a/")] == ["a/1", "a/10"]
    assert [o.key for o in storage.list("b/", start_after="b/1/x")] == ["b/2"]
    assert [o.key for o in storage.list(start_after="b/2")] == ["c"]
    assert storage.names("b") == ["2"]  # objects directly under b/, not b/1/x
    assert sorted(storage.names("a")) == ["1", "10"] and storage.names("none") == []
    assert storage.uri("a/1").endswith("a/1")


# ---------------------------------------------------------------------------------------- multipart uploads

def test_a_multipart_upload_is_invisible_until_completed_and_completing_is_idempotent(s3):
    upload = s3.start_upload("dt=1/part-0.json")
    first = s3.upload_part("dt=1/part-0.json", upload, 1, b"a" * MIN_PART_SIZE)
    last = s3.upload_part("dt=1/part-0.json", upload, 2, b"tail\n")
    assert list(s3.list()) == [] and s3.read("dt=1/part-0.json") is None  # pending: nothing visible
    assert [(u.key, u.upload_id) for u in s3.pending_uploads()] == [("dt=1/part-0.json", upload)]
    assert s3.complete_upload("dt=1/part-0.json", upload, [first, last]) in (True, False)
    info = s3.info("dt=1/part-0.json")
    assert info.size == MIN_PART_SIZE + 5 and info.version == multipart_etag([first, last])
    # roll-forward completes it again: the store answers 200 or NoSuchUpload, both are "done"
    assert s3.complete_upload("dt=1/part-0.json", upload, [first, last]) in (True, False)
    assert s3.complete_upload("dt=1/part-0.json", "no-such-upload-id", [first, last]) is False
    assert list(s3.pending_uploads()) == []


def test_completing_a_vanished_upload_whose_object_differs_is_an_error(s3):
    upload = s3.start_upload("p")
    part = s3.upload_part("p", upload, 1, b"data")
    s3.abort_upload("p", upload)
    s3.abort_upload("p", upload)  # already gone: fine
    with pytest.raises(StorageError, match="is gone .*NoSuchUpload.* no object"):
        s3.complete_upload("p", "no-such-upload-id", [part])
    s3.put("p", b"other bytes")
    with pytest.raises(StorageError, match="an object of 11 bytes"):
        s3.complete_upload("p", "no-such-upload-id", [part])


def test_pending_uploads_are_listed_to_the_end_across_pages(s3):
    started = {s3.start_upload(f"part-{i}") for i in range(5)}
    assert {u.upload_id for u in s3.pending_uploads(page_size=2)} == started
    for upload in list(s3.pending_uploads()):
        s3.abort_upload(upload.key, upload.upload_id)
    assert list(s3.pending_uploads()) == []


def test_part_numbers_outside_the_store_range_are_refused(s3):
    upload = s3.start_upload("x")
    with pytest.raises(StorageError, match="part number 0 is outside 1..10000"):
        s3.upload_part("x", upload, 0, b"")
    s3.abort_upload("x", upload)


def test_multipart_etag_is_the_md5_of_the_part_md5s():
    parts = [UploadedPart(number=1, etag='"' + "00" * 16 + '"', size=1), UploadedPart(number=2, etag="ff" * 16, size=1)]
    assert multipart_etag(parts).endswith('-2"') and len(multipart_etag(parts)) == 2 + 32 + 2


# ---------------------------------------------------------------------------------------- conditional writes

def _ignore_conditions(storage: S3Storage) -> None:
    """Make the client drop If-None-Match / If-Match before signing: to the real server the
    requests are then unconditional, as a store that ignores the headers would treat them."""
    def strip(request, **_):
        del request.headers["If-None-Match"]
        del request.headers["If-Match"]

    storage.client.meta.events.register("before-sign.s3.PutObject", strip)


def test_a_store_that_honours_conditions_passes_the_start_check(s3):
    s3.check_conditional_writes()
    assert list(s3.list()) == []  # the probe is gone


def test_a_store_that_ignores_conditions_is_refused_naming_its_endpoint(s3_server, s3_bucket):
    storage = S3Storage(S3Location(scheme="s3", bucket=s3_bucket, prefix=""), S3Config.from_options(s3_server.options()))
    _ignore_conditions(storage)
    with pytest.raises(ConfigError, match="s3.allowUnconditionalWrites") as refused:
        storage.check_conditional_writes()
    assert f"at {s3_server.endpoint} ignores conditional writes" in str(refused.value)
    assert s3_server.secret_access_key not in str(refused.value)
    unsafe = S3Storage(storage.location, S3Config.from_options({**s3_server.options(),
                                                               "s3.allowUnconditionalWrites": "true"}))
    _ignore_conditions(unsafe)
    unsafe.check_conditional_writes()  # the user opted in
    assert list(unsafe.list()) == []


def test_an_s3_storage_reaches_only_its_prefix(s3_server, s3_bucket):
    options = s3_server.options()
    a = open_storage(parse_location("path", f"s3://{s3_bucket}/a"), options)
    ab = open_storage(parse_location("path", f"s3://{s3_bucket}/ab"), options)
    a.put("x", b"1")
    ab.put("y", b"2")
    assert [o.key for o in a.list()] == ["x"] and [o.key for o in ab.list()] == ["y"]
    assert a.uri("x") == f"s3://{s3_bucket}/a/x"
    key = uuid.uuid4().hex
    assert a.create_if_absent(key, b"") is not None and ab.create_if_absent(key, b"") is not None


def test_a_ranged_get_reads_bytes_start_to_end(s3):
    s3.put("f.csv", b"0123456789")
    assert s3.read_range("f.csv", 2, 5) == b"234" and s3.read_range("f.csv", 5, 5) == b""
    assert s3.read_range("f.csv", 8, 20) == b"89"  # a range past the end ends at the end


def test_an_s3_listing_read_ahead_page_by_page_yields_every_key_once_in_order(s3):
    """The source's listing asks for the next page while the current one is gone through: every
    key once, in key order, after ``start_after`` too, as without reading ahead."""
    keys = [f"pages/k{i}" for i in range(5)]
    for key in keys:
        s3.put(key, b"x")
    for read_ahead in (True, False):
        assert [o.key for o in s3.list("pages/", read_ahead=read_ahead, page_size=2)] == keys
        assert [o.key for o in s3.list("pages/", start_after="pages/k1", read_ahead=read_ahead, page_size=2)] == keys[2:]
