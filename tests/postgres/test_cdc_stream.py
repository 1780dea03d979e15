"""``sparklink.postgres-cdc`` end to end: the set-up refusals before any read, and the family's
SIGKILL sequence (snapshot, then inserts, updates and deletes of two tables into the file sink,
read back by Spark's own JSON reader; the slot's position after the run). Each change's exact
place in a key's sequence (several updates in one transaction, key changes, types, TOAST) is
checked without Spark in test_cdc_log.py."""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from pathlib import Path

import pytest


def _name() -> str:
    return "cdc_" + uuid.uuid4().hex[:8]


@pytest.fixture
def slot(postgres):
    """A slot name; the slot is dropped afterwards (a slot keeps WAL for the rest of the session)."""
    name = _name()
    yield name
    with postgres.connect(autocommit=True) as conn:
        conn.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = %s "
                     "AND NOT active", [name])


def _last_committed_end(checkpoint: Path) -> int:
    """The source's end offset of the newest batch in Spark's commit log (read from the checkpoint)."""
    committed = max(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
    lines = (checkpoint / "offsets" / str(committed)).read_text().splitlines()
    return json.loads(lines[-1])["lsn"]


def _slot_position(postgres, slot: str) -> int:
    with postgres.connect(autocommit=True) as conn:
        row = conn.execute("SELECT (confirmed_flush_lsn - '0/0'::pg_lsn)::bigint, active FROM pg_replication_slots "
                           "WHERE slot_name = %s", [slot]).fetchone()
    assert row is not None and not row[1]
    return row[0]


def test_set_up_errors_are_one_line_before_any_read(spark, postgres, tmp_path):
    from sparklink.errors import ConfigError
    from sparklink.postgres.cdc_config import CdcError
    from sparklink.postgres.cdc_source import PostgresCdcSource
    from sparklink.source import READ_ALL

    table, slot = _name(), _name()
    with postgres.connect(autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, v text)")
        conn.execute(f"CREATE ROLE {slot} LOGIN PASSWORD 'pw'")
        conn.execute(f"GRANT SELECT ON {table} TO {slot}")
    base = {"dsn": postgres.dsn, "table": f"public.{table}", "slotName": slot, "publication": f"{slot}_pub"}
    with pytest.raises(ConfigError, match="slotname.*did you mean 'slotName'|slotNam.*did you mean"):
        PostgresCdcSource({**base, "slotNam": "x"})
    with pytest.raises(ConfigError, match="not schema-qualified"):
        PostgresCdcSource({**base, "table": table})
    with pytest.raises(ConfigError, match="does not exist"):
        PostgresCdcSource({**base, "table": "public.missing_table"}).schema()
    unprivileged = postgres.dsn.replace("user=sparklink", f"user={slot}").replace(f"password={postgres.password}",
                                                                                 "password=pw")
    with pytest.raises(CdcError, match="no REPLICATION privilege"):
        PostgresCdcSource({**base, "dsn": unprivileged}).create_enumerator(streaming=True)
    with postgres.connect(autocommit=True) as conn:
        conn.execute(f"ALTER ROLE {slot} REPLICATION")
    with pytest.raises(CdcError, match=f"publication '{slot}_pub' does not exist and could not be created"):
        PostgresCdcSource({**base, "dsn": unprivileged}).create_enumerator(streaming=True)
    with postgres.connect(autocommit=True) as conn:
        conn.execute(f"CREATE PUBLICATION {slot}_other FOR TABLE {table}")
        conn.execute(f"CREATE TABLE {table}_b (id int)")
        conn.execute(f"CREATE PUBLICATION {slot}_b FOR TABLE {table}_b")
    with pytest.raises(CdcError, match="does not publish table"):
        PostgresCdcSource({**base, "publication": f"{slot}_b"}).create_enumerator(streaming=True)
    # a slot held by another consumer: PostgreSQL's own pg_recvlogical streaming from it
    from sparklink.testing.postgres import postgres_bin_dir

    with postgres.connect(autocommit=True) as conn:
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", [slot])
    consumer = subprocess.Popen([str(postgres_bin_dir() / "pg_recvlogical"), "-d", postgres.dsn, "-S", slot, "--start",
                                 "-o", "proto_version=1", "-o", f"publication_names={slot}_other", "-f", "/dev/null"],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while _slot_active(postgres, slot) is None:
            assert consumer.poll() is None, consumer.stdout.read() if consumer.stdout else ""
            assert time.monotonic() < deadline, "pg_recvlogical did not take the slot"
            time.sleep(0.05)
        with pytest.raises(CdcError, match=f"slot '{slot}' is in use by another consumer"):
            PostgresCdcSource({**base, "publication": f"{slot}_other"}).create_enumerator(streaming=True)
    finally:
        consumer.terminate()
        consumer.wait(30)
    while _slot_active(postgres, slot) is not None:
        time.sleep(0.05)
    # the slot exists (a dropped checkpoint's?): a new query snapshots and reads the log from the slot's position
    enumerator = PostgresCdcSource({**base, "publication": f"{slot}_other"}).create_enumerator(streaming=True)
    start = enumerator.initial_offset()
    assert start["lsn"] == _slot_position(postgres, slot) and start["snapshot"] == {"table": 0, "from": None}
    assert [s.state["kind"] for s in enumerator.plan_splits(start, enumerator.latest_offset(start, READ_ALL))] \
        == ["snapshot"]
    enumerator.close()
    with postgres.connect(autocommit=True) as conn:
        conn.execute("SELECT pg_drop_replication_slot(%s)", [slot])


def _slot_active(postgres, slot: str):
    with postgres.connect(autocommit=True) as conn:
        row = conn.execute("SELECT active_pid FROM pg_replication_slots WHERE slot_name = %s", [slot]).fetchone()
    return row[0] if row else None


def _committed(checkpoint: Path) -> int:
    commits = checkpoint / "commits"
    return sum(1 for p in commits.iterdir() if p.name.isdigit()) if commits.exists() else 0


def _in_snapshot(checkpoint: Path) -> bool:
    """Whether the newest committed batch's end is still inside the snapshot."""
    committed = max(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
    return "snapshot" in json.loads((checkpoint / "offsets" / str(committed)).read_text().splitlines()[-1])


def test_a_server_without_a_logical_wal_is_refused_before_any_read(tmp_path):
    """A second server of PostgreSQL's own, started with ``wal_level=replica`` (its default): the
    source refuses at start, naming the setting, its value and what to change; no slot or
    publication is left behind."""
    from sparklink.postgres.cdc_config import CdcError
    from sparklink.postgres.cdc_source import PostgresCdcSource
    from sparklink.testing.postgres import start_postgres

    server = start_postgres(max_prepared_transactions=0, wal_level="replica")
    try:
        with server.connect(autocommit=True) as conn:
            conn.execute("CREATE TABLE events (id int PRIMARY KEY, v text)")
        source = PostgresCdcSource({"dsn": server.dsn, "table": "public.events", "slotName": "replica_slot",
                                   "publication": "replica_pub"})
        with pytest.raises(CdcError) as refused:
            source.create_enumerator(streaming=True)
        message = str(refused.value)
        assert "wal_level is 'replica', not 'logical'" in message and "set wal_level = logical" in message, message
        assert "\n" not in message.strip(), message
        with server.connect(autocommit=True) as conn:
            assert conn.execute("SELECT count(*) FROM pg_replication_slots").fetchone()[0] == 0
            assert conn.execute("SELECT count(*) FROM pg_publication").fetchone()[0] == 0
    finally:
        server.stop()


@pytest.mark.slow
def test_pipeline_survives_driver_kills_during_snapshot_and_stream(spark, postgres, tmp_path, slot, driver):
    """The CDC family's real SIGKILL sequence: two tables change all the time (a process of its
    own) while sparklink.postgres-cdc runs into three upsert sinks in one driver (sparklink.delta,
    sparklink.postgres and sparklink.iceberg, writeMode=upsert, sequenceColumn=_lsn, each query with
    its own slot); the driver is SIGKILLed three times on Spark's commit log (twice during the
    chunked snapshot, once in the log); a final run drains the log. Then the Delta table read by
    delta-rs, the Iceberg table read by pyiceberg and the target table equal a SELECT of the source
    tables, and each slot is at its query's last committed end."""
    import sys

    from deltalake import DeltaTable

    tables = [_name(), _name()]
    with postgres.connect(autocommit=True) as conn:
        for table in tables:
            conn.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, v text)")
            conn.execute(f"INSERT INTO {table} SELECT g, 'v' || g FROM generate_series(1, 400) g")
    checkpoint, stop, delta, target = tmp_path / "ck", tmp_path / "stop", tmp_path / "delta", _name()
    from tests.iceberg.iceberg_readers import catalog_options, load_table

    iceberg = catalog_options(tmp_path / "iceberg", table="cdc.changes")
    args = dict(dsn=postgres.dsn, tables=", ".join(f"public.{t}" for t in tables), slot=slot, delta=str(delta),
                target=target, checkpoint=str(checkpoint), iceberg=iceberg)
    watched = checkpoint / "delta"  # the kills follow the Delta query's commit log
    # the snapshot is 800+ rows (keys up to 800 a table), at most 200 a batch: the first two kills land in it
    conditions = [("the first committed batch", lambda: _committed(watched) >= 1),
                  ("one more committed batch", lambda: _committed(watched) >= 2),
                  ("a committed batch of the log", lambda: _committed(watched) >= 3 and not _in_snapshot(watched))]
    phases, writer = [], None
    try:
        for what, condition in conditions:
            running = driver.start("tests.postgres.jobs:cdc_pipeline", args)
            running.kill_when(condition, what=what)
            phases.append(_in_snapshot(watched))
            if writer is None:  # the slots exist now: every change from here on is in their logs
                writer = subprocess.Popen([sys.executable, "-m", "sparklink.testing.cdc_changes", postgres.dsn,
                                           str(stop), *tables], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                          text=True)
    finally:
        stop.touch()
        made = writer.communicate(timeout=60)[0] if writer is not None else ""
    assert writer is not None and writer.returncode == 0, made
    assert phases[0] and phases[1] and not phases[-1], phases  # killed during the snapshot and during the log
    from tests.postgres.jobs import cdc_pipeline

    queries = cdc_pipeline(spark, **args, available_now=True)
    for query in queries:
        assert query.exception() is None, query.exception()
    progress = [p["sources"][0] for p in queries[0].recentProgress if p["sources"]]
    assert any(p.get("latestOffset") for p in progress), progress  # reportLatestOffset: the WAL position
    with postgres.connect(autocommit=True) as conn:
        expected = {(f"public.{t}", i): v for t in tables for i, v in conn.execute(f"SELECT id, v FROM {t}")}
        in_target = {(t, i): v for t, i, v in conn.execute(f"SELECT _table, id, v FROM {target}")}
    in_delta = {(r["_table"], r["id"]): r["v"] for r in DeltaTable(str(delta)).to_pyarrow_table().to_pylist()}
    in_iceberg = {(r["_table"], r["id"]): r["v"] for r in load_table(iceberg).scan().to_arrow().to_pylist()}
    for name, got in (("delta", in_delta), ("postgres", in_target), ("iceberg", in_iceberg)):
        missing = sorted(set(expected) - set(got))[:5]
        wrong = sorted(k for k in expected if k in got and got[k] != expected[k])[:5]
        assert got == expected, f"{name}: missing {missing}, extra {sorted(set(got) - set(expected))[:5]}, " \
                                f"wrong {wrong}"
    assert int(made) > 0  # changes were made all along
    assert _slot_position(postgres, slot) == _last_committed_end(checkpoint / "delta")
    assert _slot_position(postgres, f"{slot}_pg") == _last_committed_end(checkpoint / "pg")
    assert _slot_position(postgres, f"{slot}_ice") == _last_committed_end(checkpoint / "iceberg")
    with postgres.connect(autocommit=True) as conn:
        for extra in ("pg", "ice"):
            conn.execute("SELECT pg_drop_replication_slot(%s)", [f"{slot}_{extra}"])
