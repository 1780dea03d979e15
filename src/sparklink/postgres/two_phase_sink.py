"""``semantic=two-phase``: Flink's TwoPhaseCommitSinkFunction on PostgreSQL prepared transactions.

Protocol (section 8.4.2):

1. *Executor, per task*: one transaction COPYs the task's rows into the target and inserts a
   marker row (sink id, batch, partition, gid); ``PREPARE TRANSACTION gid`` ends it. The gid
   ``sl_<sinkId>_<batch>_<partition>_<attempt>_<job>`` is the task's committable. A failed
   task rolls its prepared transaction back (:meth:`TwoPhaseWriter.abort`).
   With ``writeMode=upsert`` the prepared transaction only *stages* the task's reduced changes:
   it creates the table ``sparklink_cl_<gid>`` (one per attempt) and COPYs them into
   it; it neither touches the target nor inserts the marker. So it locks no row of the target,
   and a second attempt of the task (speculative, or a retry after an executor was lost after
   PREPARE) never waits for the first one's locks.
2. *Driver*: the SDK logs the batch's gids durably (``sink.after_log``), then the committer
   runs ``COMMIT PREPARED`` for each, in task order. A gid that is no longer prepared but whose
   marker row exists was committed before a crash: idempotent. With ``writeMode=upsert`` each
   ``COMMIT PREPARED`` makes the task's staging table visible, and one ordinary transaction
   then applies it to the target (:meth:`ChangelogApplier.apply_staged`), inserts the marker
   (txn = gid) and drops it. Rolled forward after a crash, a gid that is no longer prepared,
   has no marker and still has its staging table was committed but not applied (the crash fell
   between the two, fault point ``postgres.before_changelog_apply``): it is applied then.
3. *Recovery* (the SDK's restore, once per query run and before the tasks of a micro-batch
   that follows a crash inside a commit): log entries left unfinished are rolled forward
   (their gids committed), then every prepared transaction of this sink for a batch the log
   already holds is an orphan of an earlier run (an attempt whose commit message was not
   used): rolled back (its staging table, created in it, goes with it). Writers of a replayed
   batch whose markers exist write nothing (the batch is committed; duplicate keys would
   otherwise fail); otherwise they roll back prepared transactions of that batch left by an
   earlier execution (a crash before the batch was logged), so no orphan keeps holding locks.
   After each commit every prepared transaction of this sink still left is an orphan of a
   failed attempt: rolled back.

A staging table is committed only by ``COMMIT PREPARED`` of a gid that is in the commit log,
and every logged entry is finished (rolled forward) before anything else happens to the sink;
``discard`` only ever rolls back gids that were never logged. So a committed staging table is
always applied and dropped, unless the apply itself fails (then the entry stays unfinished and
each restart tries it again, naming the cause).
"""

from __future__ import annotations

import logging

import psycopg
from psycopg import errors as pg_errors
from psycopg import sql

from sparklink.errors import CommitError, ConfigError
from sparklink.faults import fault_point
from sparklink.postgres.changelog_apply import ChangelogApplier, Staged, staging_table_name
from sparklink.postgres.commit_markers import (
    batch_committed,
    ensure_marker_table,
    insert_marker,
    marker_exists,
    prune_markers,
)
from sparklink.postgres.sink_base import CopyingWriter, PostgresSink
from sparklink.postgres.sink_config import PostgresSinkOptions
from sparklink.sink import CommitLog, CommitRequest, Committable, Committer, WriterContext
from sparklink.sink.protocol import roll_forward
from sparklink.sink.sink import RestoreContext

LOG = logging.getLogger(__name__)
COMMITTABLE_VERSION = 1  # rows and marker in the prepared transaction
STAGED_COMMITTABLE_VERSION = 2  # writeMode=upsert: changes staged in "staging", applied by the committer


def gid_prefix(sink_id: str) -> str:
    return f"sl_{sink_id}_"


def prepared_gids(conn: psycopg.Connection, prefix: str) -> list[str]:
    """This sink's prepared transactions in the current database."""
    rows = conn.execute("SELECT gid FROM pg_prepared_xacts WHERE database = current_database() "
                        "AND left(gid, length(%s)) = %s ORDER BY gid", (prefix, prefix)).fetchall()
    return [r[0] for r in rows]


def rollback_prepared(conn: psycopg.Connection, gid: str) -> bool:
    """ROLLBACK PREPARED on an autocommit connection; True if this call rolled ``gid`` back.

    False if ``gid`` is not prepared, or if it is *busy*: another session is finishing it at
    this moment. That happens when the tasks of a replayed batch all clean up the earlier
    execution's transactions at once (PostgreSQL: "prepared transaction ... is busy", SQLSTATE
    55000); the other session completes it, so this one leaves it alone.
    """
    try:
        conn.execute(sql.SQL("ROLLBACK PREPARED {}").format(sql.Literal(gid)))
    except pg_errors.UndefinedObject:
        return False
    except pg_errors.ObjectNotInPrerequisiteState:
        LOG.info("prepared transaction %s is being finished by another session", gid)
        return False
    return True


class TwoPhaseWriter(CopyingWriter):
    """Executor side: COPY + marker in one transaction, then PREPARE TRANSACTION (upsert mode:
    the reduced changes COPYed into the attempt's own staging table, then PREPARE)."""

    def __init__(self, sink: "TwoPhaseSink", context: WriterContext):
        super().__init__(sink, context)
        self.gid = (f"{gid_prefix(self.config.sink_id)}{self.batch_key}_{context.partition_id}_"
                    f"{context.attempt_number}_{context.job_id[:8]}")
        self.prepared = False

    def accepts_rows(self) -> bool:
        """Executor side, before the first row. A replay of a committed batch writes nothing.
        Otherwise prepared transactions of this batch from an earlier execution (another job
        id: a driver crashed before logging the batch, so they can never be committed) are
        rolled back, so they do not hold locks on the keys this attempt writes again."""
        assert self.conn is not None
        if self.context.batch_id is None:
            return True
        committed = batch_committed(self.conn, self.config.table, sink_id=self.config.sink_id,
                                    batch_key=self.batch_key)
        self.conn.rollback()
        if committed:
            LOG.info("batch %s is already committed to %s; this replay writes nothing", self.batch_key,
                     self.config.table)
            return False
        own_job = self.context.job_id[:8]
        self.conn.autocommit = True
        try:
            for gid in prepared_gids(self.conn, f"{gid_prefix(self.config.sink_id)}{self.batch_key}_"):
                if not gid.endswith(f"_{own_job}") and rollback_prepared(self.conn, gid):
                    LOG.info("rolled back prepared transaction %s of an earlier execution of batch %s",
                             gid, self.batch_key)
        finally:
            self.conn.autocommit = False
        return True

    def prepare_commit(self) -> list[Committable]:
        if not self.has_rows:
            return []
        assert self.conn is not None  # has_rows
        changes = self.reduced_changes()
        staging = staging_table_name(self.gid)
        staged: Staged | None = None
        try:
            if changes is not None and changes.num_rows:
                assert self.applier is not None  # changes are kept in upsert mode only
                staged = self.applier.stage(self.conn, changes, staging)
            else:  # append mode (rows COPYed into the target), or an upsert task without changes
                insert_marker(self.conn, self.config.table, sink_id=self.config.sink_id, batch_key=self.batch_key,
                              part=self.context.partition_id, txn=self.gid, row_count=self.rows)
            self.conn.execute(sql.SQL("PREPARE TRANSACTION {}").format(sql.Literal(self.gid)))
        except psycopg.Error as exc:
            raise self.config.connection.error(f"preparing transaction {self.gid}", exc) from None
        self.prepared = True
        fault_point("postgres.after_prepare", batch_id=self.context.batch_id, attempt=self.context.attempt_number)
        committable: Committable = {"v": COMMITTABLE_VERSION, "gid": self.gid, "rows": self.rows,
                                    "partition": self.context.partition_id, "batch": self.batch_key}
        if staged is not None:
            committable.update(v=STAGED_COMMITTABLE_VERSION, staging=staging, deletes=staged.deletes,
                               upserts=staged.upserts)
        return [committable]

    def abort(self) -> None:
        if not self.prepared:
            super().abort()
            return
        with self.config.connection.connect(autocommit=True) as conn:
            try:
                rollback_prepared(conn, self.gid)
            except psycopg.Error as exc:
                raise self.config.connection.error(f"rolling back prepared transaction {self.gid}", exc) from None
        self.prepared = False


class TwoPhaseCommitter(Committer):
    """Driver side: COMMIT PREPARED each gid of the batch, in task order (idempotent through the
    markers); with ``writeMode=upsert`` each followed by the apply of its staging table."""

    def __init__(self, sink: "TwoPhaseSink"):
        self.config = sink.config
        self.applier = sink.changelog_applier
        self._conn: psycopg.Connection | None = None

    def commit(self, requests: list[CommitRequest]) -> None:
        if self._conn is None:
            self._conn = self.config.connection.connect(autocommit=True)
        for request in requests:
            committable = request.committable
            gid = committable["gid"]
            version = committable.get("v", COMMITTABLE_VERSION)
            if version not in (COMMITTABLE_VERSION, STAGED_COMMITTABLE_VERSION):
                raise CommitError(f"prepared transaction {gid}: committable version {version} is not known to this "
                                  f"sparklink (it knows {COMMITTABLE_VERSION} and {STAGED_COMMITTABLE_VERSION}); "
                                  "finish the query with the version that wrote it")
            staging = committable.get("staging") if version == STAGED_COMMITTABLE_VERSION else None
            try:
                self._conn.execute(sql.SQL("COMMIT PREPARED {}").format(sql.Literal(gid)))
            except pg_errors.UndefinedObject:
                if self._committed_before(request, gid, staging):
                    continue
            except psycopg.Error as exc:
                raise self.config.connection.error(f"COMMIT PREPARED {gid}", exc) from None
            if staging is not None:
                fault_point("postgres.before_changelog_apply", batch_id=request.batch_id)
                self._apply_staged(committable, staging)
            fault_point("postgres.between_commit_prepared", batch_id=request.batch_id)

    def _committed_before(self, request: CommitRequest, gid: str, staging: str | None) -> bool:
        """``gid`` is not prepared (a roll-forward after a crash). True when nothing is left to
        do for it (already committed, or its loss is reported); False when its staging table
        was committed but not applied yet."""
        assert self._conn is not None
        try:
            if marker_exists(self._conn, self.config.table, sink_id=self.config.sink_id, txn=gid):
                request.signal_already_committed()
                return True
            if staging is not None and self._applier(gid).staging_exists(self._conn, staging):
                LOG.info("prepared transaction %s was committed but its staged changes not applied (a crash in "
                         "between): applying them now", gid)
                return False
        except psycopg.Error as exc:
            raise self.config.connection.error(f"checking whether {gid} was committed", exc) from None
        request.signal_failed_with_unknown_reason(CommitError(
            f"prepared transaction {gid} ({request.committable['rows']} rows for {self.config.table}) "
            "is neither prepared nor committed: it was rolled back outside sparklink, its rows are lost"))
        return True

    def _applier(self, gid: str) -> ChangelogApplier:
        if self.applier is None:
            raise CommitError(f"prepared transaction {gid} staged changes (writeMode=upsert), but this sink has "
                              "writeMode=append; finish the query with the options of the run that wrote it")
        return self.applier

    def _apply_staged(self, committable: Committable, staging: str) -> None:
        """One ordinary transaction: the staging table applied to the target, the marker (txn =
        gid) inserted, the staging table dropped. The target's rows are locked only here."""
        assert self._conn is not None
        gid = committable["gid"]
        applier = self._applier(gid)
        try:
            with self._conn.transaction():
                applier.apply_staged(self._conn, staging, Staged(deletes=int(committable["deletes"]),
                                                                 upserts=int(committable["upserts"])))
                insert_marker(self._conn, self.config.table, sink_id=self.config.sink_id,
                              batch_key=committable["batch"], part=committable["partition"], txn=gid,
                              row_count=committable["rows"])
        except psycopg.Error as exc:
            raise self.config.connection.error(f"applying the changes staged by {gid} to {self.config.table}",
                                               exc) from None

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


class TwoPhaseSink(PostgresSink):
    def create_writer(self, context: WriterContext) -> TwoPhaseWriter:
        return TwoPhaseWriter(self, context)

    def create_committer(self) -> TwoPhaseCommitter:
        return TwoPhaseCommitter(self)

    def prepare_target(self, conn: psycopg.Connection) -> None:
        """Driver side, whenever PySpark builds the sink: check the server and create the
        marker table. Recovery is :meth:`restore`."""
        row = conn.execute("SHOW max_prepared_transactions").fetchone()
        assert row is not None  # SHOW answers one row
        limit = int(row[0])
        conn.commit()
        if limit <= 0:
            raise ConfigError(PostgresSinkOptions.semantic.key, "two-phase needs prepared transactions, but the server has "
                                               "max_prepared_transactions = 0; set it above the number of "
                                               "concurrent write tasks (postgresql.conf, then restart)",
                              "upsert, write-ahead, at-least-once")
        ensure_marker_table(conn, self.config.table)

    def restore(self, context: RestoreContext) -> None:
        """Once per query run (driver side): roll unfinished commits forward, then roll back this
        sink's prepared transactions of batches the log already holds. Safe while a micro-batch
        is in flight: its own transactions belong to a batch the log does not hold yet (or to a
        replay of a committed one, whose writers prepare nothing)."""
        log_dir = self.commit_log_dir()
        if log_dir is None:
            return
        log = CommitLog(log_dir)
        roll_forward(self, log)
        latest = log.latest_batch_id()
        if latest is None:
            return
        prefix = gid_prefix(self.config.sink_id)
        with self.config.connection.connect(autocommit=True) as conn:
            try:
                for gid in prepared_gids(conn, prefix):
                    batch_key = gid[len(prefix):].split("_", 1)[0]
                    if batch_key.isdigit() and int(batch_key) <= latest and rollback_prepared(conn, gid):
                        LOG.info("rolled back prepared transaction %s left by an earlier run (%s)", gid,
                                 context.reason)
            except psycopg.Error as exc:
                raise self.config.connection.error("rolling back an earlier run's prepared transactions", exc) from None

    def _rollback_orphans(self, conn: psycopg.Connection) -> None:
        conn.autocommit = True
        for gid in prepared_gids(conn, gid_prefix(self.config.sink_id)):
            if rollback_prepared(conn, gid):
                LOG.info("rolled back orphan prepared transaction %s of a failed attempt", gid)

    def discard(self, committables: list[Committable]) -> None:
        """A replayed or failed batch: roll its prepared transactions back (driver side)."""
        with self.config.connection.connect(autocommit=True) as conn:
            for committable in committables:
                rollback_prepared(conn, committable["gid"])

    def post_commit(self, batch_id: int | None, committables: list[Committable]) -> None:
        """Every gid of the batch is committed; any prepared one left is an orphan. Markers of
        batches older than the commit log's retention are pruned."""
        if batch_id is None:
            return  # a df.write job may run beside other jobs of this sink: leave their gids alone
        with self.config.connection.connect(autocommit=True) as conn:
            self._rollback_orphans(conn)
            conn.autocommit = False
            try:
                prune_markers(conn, self.config.table, sink_id=self.config.sink_id,
                              before_batch=batch_id - self.commit_log_retention() + 1)
            except psycopg.Error as exc:
                raise self.config.connection.error("pruning old commit markers", exc) from None
