"""What a plain S3 client (boto3, nobody's code here) sees of a file sink output under a prefix:
the visible objects' ids, every key, and the open multipart uploads (test side)."""

from __future__ import annotations

import io
import json

import pyarrow.parquet as pq

PREFIX = "out"


def all_keys(client, bucket: str, prefix: str = PREFIX) -> list[str]:
    keys = []
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=f"{prefix}/"):
        keys.extend(item["Key"] for item in page.get("Contents", ()))
    return keys


def visible_keys(client, bucket: str, prefix: str = PREFIX) -> list[str]:
    """Keys under the output a plain reader takes (no segment starting with '.' or '_')."""
    return [k for k in all_keys(client, bucket, prefix)
            if not any(part.startswith((".", "_")) for part in k[len(prefix) + 1:].split("/"))]


def s3_reader_ids(client, bucket: str, fmt: str, prefix: str = PREFIX) -> list[int]:
    """Ids in the output's visible objects, as a plain reader of the bucket sees them."""
    ids: list[int] = []
    for key in visible_keys(client, bucket, prefix):
        data = client.get_object(Bucket=bucket, Key=key)["Body"].read()
        if fmt == "parquet":
            ids.extend(pq.read_table(io.BytesIO(data), columns=["id"]).column("id").to_pylist())
        else:
            ids.extend(json.loads(line)["id"] for line in data.decode("utf-8").splitlines() if line.strip())
    return sorted(ids)


def pending_uploads(client, bucket: str, prefix: str = PREFIX) -> list[str]:
    found = []
    for page in client.get_paginator("list_multipart_uploads").paginate(Bucket=bucket, Prefix=f"{prefix}/"):
        found.extend(f"{u['Key']} (upload {u['UploadId']})" for u in page.get("Uploads", ()))
    return found
