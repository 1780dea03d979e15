"""A private PostgreSQL server for tests and soaks: ``initdb`` + ``pg_ctl`` on loopback, in a
temporary directory, stopped by :meth:`PostgresServer.stop` (test process side)."""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparklink.testing.readiness import wait_until_ready


@dataclass
class PostgresServer:
    """A private PostgreSQL server started by :func:`start_postgres` (loopback only)."""

    host: str
    port: int
    user: str
    password: str
    dbname: str
    root: Path
    _stop_command: list[str]

    @property
    def dsn(self) -> str:
        return f"host={self.host} port={self.port} user={self.user} password={self.password} dbname={self.dbname}"

    @property
    def url(self) -> str:
        return f"postgresql://{self.user}:{self.password}@{self.host}:{self.port}/{self.dbname}"

    def connect(self, **kwargs: Any):
        import psycopg

        return psycopg.connect(self.dsn, **kwargs)

    def stop(self) -> None:
        subprocess.run(self._stop_command, capture_output=True)
        shutil.rmtree(self.root, ignore_errors=True)


def postgres_bin_dir() -> Path | None:
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), reverse=True)
    if candidates:
        return Path(candidates[0]).parent
    found = shutil.which("initdb")
    return Path(found).parent if found else None


def start_postgres(max_prepared_transactions: int = 20, wal_level: str = "logical") -> PostgresServer:
    """Start a private PostgreSQL server with ``initdb`` + ``pg_ctl`` on a free loopback port, in
    a temporary directory (as the unprivileged user ``nobody`` when run as root). ``wal_level``:
    ``logical`` (what change data capture needs), or another level to test its refusal."""
    import psycopg

    bin_dir = postgres_bin_dir()
    if bin_dir is None:
        raise FileNotFoundError("PostgreSQL server binaries (initdb, pg_ctl) not found under /usr/lib/postgresql/*/bin "
                                "(`make postgres-server` installs them through apt; `make test` runs it)")
    root = Path(tempfile.mkdtemp(prefix="sparklink-pg-"))
    data = root / "data"
    password = "s3cr3t-Pa55"
    (root / "pw").write_text(password)
    run_as: list[str] = []
    if os.geteuid() == 0:  # initdb refuses to run as root
        subprocess.run(["chown", "-R", "nobody", str(root)], check=True)
        run_as = ["runuser", "-u", "nobody", "--"]
    subprocess.run(run_as + [str(bin_dir / "initdb"), "-D", str(data), "-U", "sparklink", "--pwfile", str(root / "pw"),
                             "-A", "scram-sha-256", "-E", "UTF8", "--no-sync"], check=True, capture_output=True)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    options = (f"-c listen_addresses=127.0.0.1 -c port={port} -c unix_socket_directories={root} "
               f"-c max_prepared_transactions={max_prepared_transactions} -c fsync=off -c max_connections=100 "
               f"-c wal_level={wal_level} -c max_replication_slots=20 -c max_wal_senders=20")  # CDC: a logical WAL
    subprocess.run(run_as + [str(bin_dir / "pg_ctl"), "-D", str(data), "-o", options, "-l", str(root / "server.log"),
                             "-w", "-t", "60", "start"], check=True, capture_output=True)
    server = PostgresServer(host="127.0.0.1", port=port, user="sparklink", password=password, dbname="postgres",
                            root=root, _stop_command=run_as + [str(bin_dir / "pg_ctl"), "-D", str(data), "-m",
                                                               "immediate", "-w", "stop"])
    wait_until_ready("PostgreSQL", lambda: server.connect().close() is None, timeout=30,
                     log_tail=lambda: (root / "server.log").read_text(errors="replace")[-4000:],
                     retry_on=(psycopg.OperationalError,))  # still starting
    return server
