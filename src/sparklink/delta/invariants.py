"""What a Delta table promises about its rows, and what the sink does about each promise (driver
side: :func:`table_invariants`; executors: :func:`check_not_null`).

Every Delta writer must keep a table's invariants; delta-rs's ``create_write_transaction``, which
the committer uses, checks none of them. So the sink looks at the table before the tasks of each
micro-batch (or ``df.write`` job) and again before committing:

* **NOT NULL** columns (``nullable: false`` in the schema) are enforced on the executors: a null
  fails the task with the column, the rule and a sample row, and nothing is committed;
* **CHECK constraints** (``delta.constraints.*``), **generated columns**
  (``delta.generationExpression``), **identity columns** (``delta.identity.*``), **SQL column
  invariants** (``delta.invariants``), **column mapping** (``delta.columnMapping.mode`` other than
  ``none``: data files must carry physical names and field ids) and **row tracking** are not
  served: a table that uses one is refused before anything is written, naming the feature (the
  expressions are SQL that sparklink does not evaluate).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa

from sparklink.delta.table_location import DeltaTableOptions
from sparklink.errors import ConfigError, DataError

if TYPE_CHECKING:  # executors import this module for check_not_null only
    from deltalake import DeltaTable

CONSTRAINT_PREFIX = "delta.constraints."
UNSERVED_WRITER_FEATURES = {"rowTracking": "row tracking (writers must assign row ids)"}


@dataclass(frozen=True, kw_only=True)
class Invariants:
    """What the tasks enforce: the table's NOT NULL columns (top level)."""

    not_null: tuple[str, ...] = ()


def _refuse(root: str, feature: str, what: str) -> ConfigError:
    return ConfigError(DeltaTableOptions.path.key, f"the Delta table {root} uses {feature} ({what}), which "
                       "sparklink.delta does not enforce when it writes; nothing was written",
                       "a table without it (or write with delta-rs's write_deltalake, which enforces it)")


def table_invariants(table: DeltaTable, root: str) -> Invariants:
    """The invariants of ``table`` the tasks enforce; a table with one the sink does not serve is
    refused (:class:`ConfigError` naming the feature). Driver side."""
    configuration = table.metadata().configuration or {}
    constraints = sorted((k[len(CONSTRAINT_PREFIX):], v) for k, v in configuration.items()
                         if k.startswith(CONSTRAINT_PREFIX))
    if constraints:
        raise _refuse(root, "CHECK constraints", ", ".join(f"{name}: {expr}" for name, expr in constraints))
    mode = configuration.get("delta.columnMapping.mode", "none")
    if mode.lower() != "none":
        raise _refuse(root, "column mapping", f"delta.columnMapping.mode = {mode}: data files need physical column "
                      "names and field ids")
    for feature in sorted(set(table.protocol().writer_features or ()) & set(UNSERVED_WRITER_FEATURES)):
        raise _refuse(root, f"the writer feature {feature}", UNSERVED_WRITER_FEATURES[feature])
    not_null = []
    for field in table.schema().fields:
        metadata = field.metadata or {}
        if "delta.generationExpression" in metadata:
            raise _refuse(root, "a generated column", f"{field.name} = {metadata['delta.generationExpression']}")
        if any(key.startswith("delta.identity.") for key in metadata):
            raise _refuse(root, "an identity column", field.name)
        if "delta.invariants" in metadata:
            raise _refuse(root, "a column invariant", f"{field.name}: {metadata['delta.invariants']}")
        if not field.nullable:
            not_null.append(field.name)
    return Invariants(not_null=tuple(not_null))


def check_not_null(batch: pa.RecordBatch | pa.Table, columns: tuple[str, ...], root: str) -> None:
    """Executor side, each batch before it is written: a null in a NOT NULL column fails the task
    (:class:`DataError` with the column, the rule and the first offending row)."""
    for column in columns:
        if column not in batch.schema.names:
            raise DataError(f"Delta table {root}: column {column} is NOT NULL and the input lacks it")
        values = batch.column(column)
        if values.null_count:
            first = values.is_null().to_pylist().index(True)
            sample = batch.slice(first, 1).to_pylist()[0]
            raise DataError(f"Delta table {root}: column {column} violates NOT NULL ({values.null_count} of "
                            f"{batch.num_rows} rows of a batch are null), e.g. the row {sample}; nothing of the "
                            "write is committed")
