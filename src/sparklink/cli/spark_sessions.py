"""The SparkSessions of the ``sparklink`` command (driver side, once per command).

``sparklink run`` runs production pipelines: its session has Spark's own defaults plus exactly
what the pipeline's ``[spark]`` table sets (and the master), nothing chosen for a small test
machine. With ``--remote sc://host:port`` (or ``SPARK_REMOTE``, as PySpark reads it) the session
is a Spark Connect client of that server: the server's driver, master and static settings are
the server's, and the ``[spark]`` table's runtime settings are set on the client's session. ``sparklink demo`` keeps small settings for a laptop and prints them. Neither imports
the test harness.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

# The demo's settings (a laptop or a 2-core CI machine); printed by the demo.
DEMO_CONF = {
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.driver.memory": "1g",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.streaming.numRecentProgressUpdates": "10000",
}


def pipeline_settings(*, master: str, app_name: str, conf: Mapping[str, str]) -> dict[str, str]:
    """Every setting ``sparklink run`` gives Spark: the master, the application name and the
    pipeline's ``[spark.conf]``; everything else stays at Spark's default."""
    return {"spark.master": master, "spark.app.name": app_name, **conf}


def build_session(settings: Mapping[str, str]):
    """A SparkSession with ``settings``, sparklink's formats registered."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    import sparklink

    builder = SparkSession.builder
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    sparklink.register(spark)
    return spark


def remote_url(option: str | None) -> str | None:
    """The Spark Connect server to run on: ``--remote``, else ``SPARK_REMOTE`` (PySpark's own
    variable), else None (a classic session). Only ``sc://`` URLs are taken: PySpark's
    ``local`` forms start a server in this process, which ``--master`` already covers."""
    url = option or os.environ.get("SPARK_REMOTE") or None
    if url is not None and not url.startswith("sc://"):
        from sparklink.errors import ConfigError

        raise ConfigError("--remote", f"'{url}' is not a Spark Connect URL", "sc://host:port")
    return url


def build_remote_session(url: str, settings: Mapping[str, str]):
    """A Spark Connect client session of the server at ``url`` with the runtime ``settings``
    (the server ignores static ones: they are its own), sparklink's formats registered."""
    from pyspark.sql import SparkSession

    import sparklink

    builder = SparkSession.builder.remote(url)
    for key, value in settings.items():
        if key != "spark.master":
            builder = builder.config(key, value)
    spark = builder.getOrCreate()
    sparklink.register(spark)
    return spark
