"""What sparklink reads from a Spark streaming checkpoint (driver side), and the facts about
the query's run that Spark hands to write tasks.

Facts checked on PySpark 4.3.0: ``<checkpointLocation>/metadata`` holds the query id as JSON
(``{"id": ...}``), written at the first start and kept across restarts. Spark builds a new
DataSource for every micro-batch in a planner worker that receives only the user's options,
so the driver side cannot see the run; write tasks can: Spark sets the local properties
``sql.streaming.queryId`` (the query id), ``streaming.sql.batchId`` and ``spark.jobGroup.id``
(the run id, ``StreamingQuery.runId``, new at every start of the query).
"""

from __future__ import annotations

import json
from pathlib import Path

from sparklink.errors import MetadataError

QUERY_ID_PROPERTY = "sql.streaming.queryId"
BATCH_ID_PROPERTY = "streaming.sql.batchId"
RUN_ID_PROPERTY = "spark.jobGroup.id"


def query_id_from_checkpoint(checkpoint: str | Path) -> str | None:
    """The streaming query id Spark keeps in ``<checkpoint>/metadata``; None before the query
    first started. Runs on the driver, once per micro-batch (one small file)."""
    path = Path(checkpoint) / "metadata"
    try:
        text = path.read_text(encoding="utf-8")
    except (FileNotFoundError, NotADirectoryError):
        return None
    except UnicodeDecodeError as exc:
        raise MetadataError(f"Spark checkpoint metadata {path} is damaged: {exc}") from None
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                query_id = json.loads(line).get("id")
            except (json.JSONDecodeError, AttributeError) as exc:
                raise MetadataError(f"Spark checkpoint metadata {path} is damaged: {exc}") from None
            return str(query_id) if query_id else None
    return None
