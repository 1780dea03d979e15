"""What delta-rs (a reader nobody here wrote) sees in a Delta table, and what boto3 lists
beside it on S3; used by the Delta tests."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import unquote

from deltalake import DeltaTable


def delta_storage_options(server) -> dict[str, str]:
    """delta-rs's settings for the test S3 server (SeaweedFS on 127.0.0.1, plain http)."""
    return {"AWS_ENDPOINT_URL": server.endpoint, "AWS_REGION": server.region, "AWS_ACCESS_KEY_ID": server.access_key_id,
            "AWS_SECRET_ACCESS_KEY": server.secret_access_key, "AWS_ALLOW_HTTP": "true"}


def open_delta(path: str | Path, storage_options: dict[str, str] | None = None) -> DeltaTable:
    return DeltaTable(str(path), storage_options=storage_options)


def delta_ids(path: str | Path, column: str = "id", storage_options: dict[str, str] | None = None) -> list[int]:
    """Sorted values of ``column`` in the table's latest version, read by delta-rs."""
    return sorted(open_delta(path, storage_options).to_pyarrow_table().column(column).to_pylist())


def referenced_paths(path: str | Path, storage_options: dict[str, str] | None = None) -> set[str]:
    """Data files any version of the table references (files a compaction removed stay
    referenced by the versions before it: time travel reads them until VACUUM)."""
    latest = open_delta(path, storage_options).version()
    return {unquote(p) for version in range(latest + 1)
            for p in DeltaTable(str(path), version=version, storage_options=storage_options)
            .get_add_actions(flatten=True).column("path").to_pylist()}


def unreferenced_files(path: str | Path) -> list[str]:
    """Data files under the (local) table that no version of it references (a failed
    attempt's leftovers), relative to the table."""
    root = Path(path)
    if not (root / "_delta_log").is_dir():
        return sorted(p.relative_to(root).as_posix() for p in root.rglob("*.parquet"))
    referenced = referenced_paths(root)
    return sorted(rel for rel in (p.relative_to(root).as_posix() for p in root.rglob("*.parquet")
                                  if "_delta_log" not in p.parts) if rel not in referenced)


def unreferenced_objects(server, uri: str) -> list[str]:
    """On S3 (boto3's listing): data objects under the table ``uri`` that no version of it
    references, and every multipart upload left open under it."""
    bucket, _, prefix = uri.split("://", 1)[1].partition("/")
    client = server.client()
    keys, token = [], None
    while True:
        page = client.list_objects_v2(Bucket=bucket, Prefix=prefix + "/", **({"ContinuationToken": token} if token else {}))
        keys += [o["Key"][len(prefix) + 1:] for o in page.get("Contents", ())]
        if not page.get("IsTruncated"):
            break
        token = page["NextContinuationToken"]
    data = [k for k in keys if not k.startswith(("_delta_log/", "_sparklink/"))]
    referenced: set[str] = set()
    if any(k.startswith("_delta_log/") for k in keys):
        referenced = referenced_paths(uri, delta_storage_options(server))
    uploads = client.list_multipart_uploads(Bucket=bucket, Prefix=prefix + "/").get("Uploads", ())
    return sorted([k for k in data if k not in referenced] + [f"upload of {u['Key']}" for u in uploads])
