"""Changelogs into keyed sinks: the one contract of ``writeMode=upsert`` (options ``writeMode``,
``keyColumns``, ``opColumn``, ``opDeleteValues``, ``sequenceColumn``) and its reduction of a
micro-batch's changes to one change per key, in Arrow.

Every sink that has keys (Delta, Iceberg, PostgreSQL, Cassandra, Kafka) includes
:class:`ChangelogOptions` in its option table, builds a :class:`Changelog` with
:meth:`Changelog.from_options` at query start (driver) and, where the sink applies a batch's
changes in one step, reduces them with :meth:`Changelog.reduce` before it merges (driver or
executor: pure Arrow, no Spark). Sinks that cannot serve upserts (the file sink) refuse
``writeMode=upsert`` with :func:`refuse_upsert`.

The semantics, the same for every sink:

* a row is a change of the row with its key; it is a delete when ``opColumn`` is given and
  its value is one of ``opDeleteValues`` (Debezium's ``d`` by default), an upsert otherwise
  (``c``, ``u``, ``r`` and null included);
* within one micro-batch only the last change per key applies: the one with the greatest
  ``sequenceColumn`` value, or without that option the last in the batch's order (the order of
  Spark's partitions, then of rows: give a ``sequenceColumn`` whenever a key can change twice in
  a batch). Two changes of one key with the same sequence value are refused (the error names the
  key); a null key or a null sequence value is refused;
* with ``sequenceColumn``, a change whose sequence value is lower than the one of the row
  already in the table is skipped (the sink compares in its merge: :func:`newer_than_stored`
  for sinks that merge in Arrow), so a replay out of order cannot take a row back;
* the ``opColumn`` is not written to the table; the ``sequenceColumn`` is (the comparison
  above needs it).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from sparklink.arrow_arrays import repeated, row_numbers
from sparklink.errors import ConfigError
from sparklink.options import Option, Options, OptionTable, choice, string

WRITE_MODE_APPEND = "append"
WRITE_MODE_UPSERT = "upsert"
WRITE_MODES = (WRITE_MODE_APPEND, WRITE_MODE_UPSERT)
DEFAULT_DELETE_VALUES = ("d",)
_ROW = "__sparklink_row"


class ChangelogOptions(OptionTable):
    """The changelog options every keyed sink's table includes (documented once in
    docs/changelogs.md)."""

    group = ("`writeMode=upsert`: a changelog applied by key (`keyColumns`, `opColumn`, `opDeleteValues`, "
             "`sequenceColumn`): see [changelogs](changelogs.md)")
    group_default = "`append`"

    write_mode = Option("writeMode", choice(*WRITE_MODES), default=WRITE_MODE_APPEND,
                        doc="`append` adds every row; `upsert` applies each row as an insert, update or delete "
                            "of the row with its key")
    key_columns = Option("keyColumns", string("comma-separated DataFrame columns"),
                         doc="the key of `writeMode=upsert`: the columns that identify a row")
    op_column = Option("opColumn", string("a DataFrame column"),
                       doc="the column that says a change is a delete (values in `opDeleteValues`); not written")
    op_delete_values = Option("opDeleteValues", string("comma-separated values"), default_doc="`d`",
                              doc="the `opColumn` values that mean delete (Debezium's `d`); others and null upsert")
    sequence_column = Option("sequenceColumn", string("a DataFrame column"),
                             doc="orders a key's changes: in a batch the greatest wins (ties refused); a change "
                                 "older than the stored row is skipped")


O = ChangelogOptions


def split_columns(text: str | None) -> tuple[str, ...]:
    """``"a, b"`` -> ``("a", "b")``; None or blank -> ``()``."""
    return tuple(part.strip() for part in (text or "").split(",") if part.strip())


@dataclass(frozen=True, kw_only=True)
class Changelog:
    """The settings of ``writeMode=upsert``; picklable (shipped to executors)."""

    key_columns: tuple[str, ...]
    op_column: str | None = None
    delete_values: tuple[str, ...] = DEFAULT_DELETE_VALUES
    sequence_column: str | None = None

    def __post_init__(self) -> None:
        if not self.key_columns:
            raise ConfigError(O.key_columns.key, "is required for writeMode=upsert (the key changes are applied by)",
                              "comma-separated column names, e.g. id or tenant,id")
        if len(set(self.key_columns)) != len(self.key_columns):
            raise ConfigError(O.key_columns.key, f"lists a column twice: {list(self.key_columns)}")
        for option, column in ((O.op_column, self.op_column), (O.sequence_column, self.sequence_column)):
            if column is not None and column in self.key_columns:
                raise ConfigError(option.key, f"'{column}' is also a key column", "a column outside keyColumns")
        if self.op_column is not None and self.op_column == self.sequence_column:
            raise ConfigError(O.sequence_column.key, f"'{self.sequence_column}' is also the opColumn")
        if not self.delete_values:
            raise ConfigError(O.op_delete_values.key, "is empty", "comma-separated values, e.g. d")

    @classmethod
    def from_options(cls, options: Options) -> "Changelog | None":
        """The changelog of ``writeMode=upsert``, None for ``append`` (where the other changelog
        options are refused, naming ``writeMode``). ``options`` are already checked by the
        sink's table (which includes :class:`ChangelogOptions`)."""
        mode = O.write_mode.value(options)
        if mode == WRITE_MODE_APPEND:
            given = [spec.key for spec in (O.op_column, O.op_delete_values, O.sequence_column) if spec.given(options)]
            if given:
                raise ConfigError(given[0], "applies to writeMode=upsert, not to writeMode=append",
                                  "add .option(\"writeMode\", \"upsert\")")
            return None
        values = split_columns(O.op_delete_values.get(options)) if O.op_delete_values.given(options) \
            else DEFAULT_DELETE_VALUES
        return cls(key_columns=split_columns(O.key_columns.get(options)), op_column=O.op_column.get(options),
                   delete_values=values, sequence_column=O.sequence_column.get(options))

    # -- schema ---------------------------------------------------------------------------------

    def check_columns(self, names: Sequence[str]) -> None:
        """Refuse a key, op or sequence column that is not among the DataFrame's ``names``."""
        missing = [k for k in self.key_columns if k not in names]
        if missing:
            raise ConfigError(O.key_columns.key, f"column(s) {missing} are not in the DataFrame", ", ".join(names))
        for option, column in ((O.op_column, self.op_column), (O.sequence_column, self.sequence_column)):
            if column is not None and column not in names:
                raise ConfigError(option.key, f"column '{column}' is not in the DataFrame", ", ".join(names))

    def stored_columns(self, names: Iterable[str]) -> list[str]:
        """The columns written to the table: every column but the ``opColumn``."""
        return [name for name in names if name != self.op_column]

    # -- one batch --------------------------------------------------------------------------------

    def delete_mask(self, changes: pa.Table) -> pa.ChunkedArray | pa.Array:
        """True where a change is a delete (never null)."""
        if self.op_column is None:
            return repeated(False, pa.bool_(), changes.num_rows)
        ops = changes.column(self.op_column)
        if not pa.types.is_string(ops.type) and not pa.types.is_large_string(ops.type):
            ops = pc.cast(ops, pa.string())
        return pc.fill_null(pc.is_in(ops, value_set=pa.array(self.delete_values, pa.string())), False)

    def reduce(self, changes: pa.Table) -> "ChangeSet":
        """The last change per key of one batch (``changes``: the batch's rows in its order).
        Raises :class:`ConfigError` for a null key, a null sequence value or two changes of one
        key with the same sequence value, naming the key."""
        self.check_columns(changes.column_names)
        for key in self.key_columns:
            nulls = changes.column(key).null_count
            if nulls:
                raise ConfigError(O.key_columns.key, f"column '{key}' is null in {nulls} change(s); a key is never "
                                                     "null")
        if self.sequence_column is not None:
            sequence = changes.column(self.sequence_column)
            if sequence.null_count:
                at = pc.index(pc.is_null(sequence), True).as_py()
                raise ConfigError(O.sequence_column.key, f"'{self.sequence_column}' is null for key "
                                                         f"{self._describe_key(changes, at)}")
        indexed = changes.append_column(_ROW, row_numbers(changes.num_rows))
        if self.sequence_column is None:
            # the last change of a key is its greatest row number: one hash pass, no sort
            last = indexed.select([*self.key_columns, _ROW]).group_by(list(self.key_columns)).aggregate([(_ROW, "max")])
            if last.num_rows == changes.num_rows:  # every key once: the batch as it is
                return ChangeSet(changelog=self, rows=changes, deletes=self.delete_mask(changes))
            maxima = last.column(f"{_ROW}_max")
            picked = changes.take(pc.take(maxima, pc.sort_indices(maxima)))  # in the batch's order
            return ChangeSet(changelog=self, rows=picked, deletes=self.delete_mask(picked))
        counts = indexed.group_by([*self.key_columns, self.sequence_column]).aggregate([(_ROW, "count")])
        if counts.num_rows == changes.num_rows and self._keys_distinct(changes):
            return ChangeSet(changelog=self, rows=changes, deletes=self.delete_mask(changes))
        ties = pc.greater(counts.column(f"{_ROW}_count"), 1)
        if pc.any(ties).as_py():
            at = pc.index(ties, True).as_py()
            raise ConfigError(O.sequence_column.key, f"two changes of key {self._describe_key(counts, at)} carry "
                                                     f"the same {self.sequence_column} "
                                                     f"{counts.column(self.sequence_column)[at].as_py()!r}; the "
                                                     "sink cannot tell which is the last")
        ordered = indexed.sort_by([(self.sequence_column, "ascending"), (_ROW, "ascending")])
        last = ordered.group_by(list(self.key_columns), use_threads=False).aggregate([(_ROW, "last")])
        rows = pc.sort_indices(last.column(f"{_ROW}_last"))
        picked = changes.take(pc.take(last.column(f"{_ROW}_last"), rows))
        return ChangeSet(changelog=self, rows=picked, deletes=self.delete_mask(picked))

    def _keys_distinct(self, changes: pa.Table) -> bool:
        if len(self.key_columns) == 1:
            return pc.count_distinct(changes.column(self.key_columns[0])).as_py() == changes.num_rows
        return changes.select(list(self.key_columns)).group_by(list(self.key_columns)).aggregate([]).num_rows \
            == changes.num_rows

    def _describe_key(self, table: pa.Table, at: int) -> str:
        return ", ".join(f"{k}={table.column(k)[at].as_py()!r}" for k in self.key_columns)


@dataclass(frozen=True)
class ChangeSet:
    """One batch reduced: one change per key (``rows``, in the batch's order) and which are deletes."""

    changelog: Changelog
    rows: pa.Table
    deletes: pa.ChunkedArray | pa.Array

    @property
    def num_rows(self) -> int:
        return self.rows.num_rows

    def upserts(self) -> pa.Table:
        """The rows to insert or update, with the stored columns (the ``opColumn`` dropped)."""
        kept = self.rows.filter(pc.invert(self.deletes))
        return kept.select(self.changelog.stored_columns(kept.column_names))

    def delete_keys(self) -> pa.Table:
        """The keys to delete (with the ``sequenceColumn`` when there is one)."""
        gone = self.rows.filter(self.deletes)
        columns = [*self.changelog.key_columns]
        if self.changelog.sequence_column is not None:
            columns.append(self.changelog.sequence_column)
        return gone.select(columns)


def newer_than_stored(changelog: Changelog, changes: pa.Table, stored: pa.Table) -> pa.Array:
    """For sinks that merge in Arrow: True for each change of ``changes`` that applies, False for
    one whose ``sequenceColumn`` value is lower than that of the stored row with its key
    (``stored``: key columns and the sequence column of the rows the batch's keys touch). All True
    without a ``sequenceColumn``; a stored row with a null sequence value never blocks a change."""
    if changelog.sequence_column is None or stored.num_rows == 0:
        return repeated(True, pa.bool_(), changes.num_rows)
    seq = changelog.sequence_column
    stored_seq = f"{seq}__stored"
    left = changes.select([*changelog.key_columns, seq]).append_column(_ROW, row_numbers(changes.num_rows))
    right = stored.select([*changelog.key_columns, seq]).rename_columns([*changelog.key_columns, stored_seq])
    # the join needs one type per key column: a table's reader may give large_string where the
    # batch has string (pyiceberg does), or another width of a number
    right = right.cast(pa.schema([*(left.schema.field(c) for c in changelog.key_columns),
                                  right.schema.field(stored_seq)]))
    joined = left.join(right, keys=list(changelog.key_columns), join_type="left outer").sort_by([(_ROW, "ascending")])
    older = pc.fill_null(pc.less(joined.column(seq), joined.column(stored_seq)), False)
    return pc.invert(older).combine_chunks()


def refuse_upsert(options: Options, sink: str) -> None:
    """For sinks without keys (the file sink): refuse ``writeMode=upsert``, naming the sinks that
    serve it."""
    mode = O.write_mode.raw(options)
    if mode is not None and mode.strip().lower() != WRITE_MODE_APPEND:
        raise ConfigError(O.write_mode.key, f"'{mode}' is not served by {sink}, which only appends",
                          "append; upserts and deletes by key go to sparklink.delta, sparklink.iceberg, "
                          "sparklink.postgres, sparklink.cassandra or sparklink.kafka")
