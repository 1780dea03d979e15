"""The ``sparklink.postgres-cdc`` source: a table's snapshot, then its changes from a logical
replication slot (``spark.readStream`` only).

Driver side, when the query starts (:meth:`PostgresCdcSource.create_enumerator`): the set-up is
checked before anything is read, each fault with a one-line error (``wal_level``, the replication
privilege, the table, the publication, a slot another consumer holds); a missing publication is
created for the table. The source itself holds only the parsed options and the table's columns,
so it pickles to the executors, where :class:`~sparklink.postgres.cdc_reader.CdcReader` reads.

Rows: the table's columns, then ``_op`` (``r`` snapshot read, ``c`` insert, ``u`` update, ``d``
delete), ``_lsn`` (the WAL position of the change; 0 for snapshot rows), ``_commit_ts`` (the
transaction's commit time; NULL for snapshot rows) and ``_table`` (``schema.name``).
"""

from __future__ import annotations

from collections.abc import Mapping

import psycopg
from psycopg import sql
from pyspark.sql.types import LongType, StringType, StructField, StructType, TimestampType

from sparklink.errors import ConfigError
from sparklink.postgres.cdc_config import METADATA_COLUMNS, CdcConfig, CdcError, PostgresCdcOptions
from sparklink.postgres.cdc_enumerator import CdcEnumerator
from sparklink.postgres.cdc_reader import CdcReader
from sparklink.postgres.type_mapping import spark_field_for
from sparklink.source import Boundedness, ReadLimit, Source
from sparklink.source.enumerator import READ_ALL

O = PostgresCdcOptions
METADATA_FIELDS = [StructField("_op", StringType(), False), StructField("_lsn", LongType(), False),
                   StructField("_commit_ts", TimestampType(), True), StructField("_table", StringType(), False)]


class PostgresCdcSource(Source):
    def __init__(self, options: Mapping[str, str] | None = None):
        super().__init__(options)
        self.config = CdcConfig.from_options(options)
        self._columns: list[tuple[str, str, int]] | None = None  # name, format_type, type oid
        self._keys: list[list[str]] = []  # the primary key of each table

    @property
    def boundedness(self) -> Boundedness:
        return Boundedness.CONTINUOUS_UNBOUNDED

    @property
    def label(self) -> str:
        return self.config.labels

    def _describe(self) -> None:
        """The tables' columns (they must agree: names and types in order) and primary keys."""
        if self._columns is not None:
            return
        first: list[tuple[str, str, int]] | None = None
        keys: list[list[str]] = []
        with self.config.connection.connect(autocommit=True) as conn:
            for index in range(len(self.config.tables)):
                oid = self._table_oid(conn, index)
                rows = conn.execute("SELECT attname, format_type(atttypid, atttypmod), atttypid::bigint FROM "
                                    "pg_attribute WHERE attrelid = %s AND attnum > 0 AND NOT attisdropped AND "
                                    "attgenerated = '' ORDER BY attnum",  # generated columns: not in the log
                                    [oid]).fetchall()
                columns = [(str(n), str(t), int(o)) for n, t, o in rows]
                if first is None:
                    first = columns
                elif [c[:2] for c in columns] != [c[:2] for c in first]:
                    theirs = dict((n, t) for n, t, _ in columns)
                    ours = dict((n, t) for n, t, _ in first)
                    diff = next((f"column '{n}' {t} there, {theirs.get(n, 'missing')} here"
                                 for n, t in ours.items() if theirs.get(n) != t),
                                next((f"column '{n}' is not in {self.config.label(0)}" for n in theirs
                                      if n not in ours), "the columns' order differs"))
                    raise ConfigError(O.tables.key, f"the columns of {self.config.label(index)} do not agree with "
                                                    f"those of {self.config.label(0)}: {diff}")
                keys.append([str(k) for (k,) in conn.execute(
                    "SELECT a.attname FROM pg_index i, unnest(i.indkey) WITH ORDINALITY AS k(attnum, n) "
                    "JOIN pg_attribute a ON a.attrelid = %s AND a.attnum = k.attnum "
                    "WHERE i.indrelid = %s AND i.indisprimary ORDER BY k.n", [oid, oid]).fetchall()])
        assert first is not None
        clash = [name for name, _, _ in first if name in METADATA_COLUMNS]
        if clash:
            raise ConfigError(O.table.key, f"table {self.config.label(0)} has a column '{clash[0]}', a name the "
                                           f"change stream uses itself ({', '.join(METADATA_COLUMNS)})")
        self._columns = first
        self._keys = keys

    def _table_oid(self, conn: psycopg.Connection, index: int) -> int:
        table = self.config.tables[index]
        row = conn.execute("SELECT to_regclass(%s)::oid::bigint", [table.identifier.as_string(conn)]).fetchone()
        if row is None or row[0] is None:
            key = O.table.key if len(self.config.tables) == 1 else O.tables.key
            raise ConfigError(key, f"table {self.config.label(index)} does not exist")
        return int(row[0])

    def schema(self) -> StructType:
        self._describe()
        assert self._columns is not None
        fields = [spark_field_for(name, type_name) for name, type_name, _ in self._columns]
        return StructType(fields + METADATA_FIELDS)

    def check_setup(self, conn: psycopg.Connection) -> None:
        """Driver side, before any read: one-line errors for what would make the stream fail later."""
        config = self.config
        wal_level = conn.execute("SHOW wal_level").fetchone()
        if wal_level is None or wal_level[0] != "logical":
            raise CdcError(f"PostgreSQL's wal_level is '{wal_level[0] if wal_level else None}', not 'logical': "
                           f"set wal_level = logical (and max_replication_slots, max_wal_senders) and restart the "
                           f"server")
        privileged = conn.execute("SELECT rolreplication OR rolsuper FROM pg_roles WHERE rolname = current_user"
                                  ).fetchone()
        if privileged is None or not privileged[0]:
            raise CdcError("the role of the dsn has no REPLICATION privilege: ALTER ROLE <role> REPLICATION (or use "
                           "a role that has it)")
        for index in range(len(config.tables)):
            self._table_oid(conn, index)
        slot = conn.execute("SELECT active_pid FROM pg_replication_slots WHERE slot_name = %s",
                            [config.slot_name]).fetchone()
        if slot is not None and slot[0] is not None:
            raise CdcError(f"replication slot '{config.slot_name}' is in use by another consumer (backend pid "
                           f"{slot[0]}); one slot serves one query")
        publication = conn.execute("SELECT puballtables, pubtruncate FROM pg_publication WHERE pubname = %s",
                                   [config.publication]).fetchone()
        if publication is None:
            try:
                conn.execute(sql.SQL("CREATE PUBLICATION {} FOR TABLE {} WITH (publish = 'insert, update, delete')")
                             .format(sql.Identifier(config.publication),
                                     sql.SQL(", ").join(t.identifier for t in config.tables)))
            except psycopg.Error as exc:
                raise CdcError(f"publication '{config.publication}' does not exist and could not be created "
                               f"({exc.diag.message_primary}): create it as the table's owner: CREATE PUBLICATION "
                               f"{config.publication} FOR TABLE {self.label}") from None
            return
        for index, table in enumerate(config.tables):
            included = conn.execute("SELECT 1 FROM pg_publication_tables WHERE pubname = %s AND schemaname = %s AND "
                                    "tablename = %s", [config.publication, table.schema, table.name]).fetchone()
            if included is None:
                label = config.label(index)
                raise CdcError(f"publication '{config.publication}' does not publish table {label}: ALTER "
                               f"PUBLICATION {config.publication} ADD TABLE {label}, or name another publication")

    def create_enumerator(self, *, streaming: bool) -> CdcEnumerator:
        if not streaming:
            raise ConfigError("format", "sparklink.postgres-cdc is a stream: use spark.readStream (for a one-off "
                                        "read of the table use sparklink.postgres)")
        self._describe()
        with self.config.connection.connect(autocommit=True) as conn:
            try:
                self.check_setup(conn)
            except psycopg.Error as exc:
                raise self.config.connection.error("checking the change stream's set-up", exc) from None
        return CdcEnumerator(self.config, self._keys)

    def create_reader(self, schema: StructType) -> CdcReader:
        self._describe()
        assert self._columns is not None
        return CdcReader(self.config, schema, [name for name, _, _ in self._columns],
                         [oid for _, _, oid in self._columns], self._keys)

    def default_read_limit(self) -> ReadLimit:
        limit = self.config.max_changes_per_trigger
        return ReadLimit(max_rows=limit) if limit else READ_ALL
