"""sparklink's test harness, apart from the runtime (the runtime never imports it).

* :func:`spark_session`: the local session tests and jobs use (small, test-only settings).
* :class:`DriverProcess` / :func:`run_driver`: a job in a driver process of its own, to SIGKILL
  at a named fault point (:mod:`sparklink.testing.faults` arms them) and restart.
* :func:`start_postgres`: a private PostgreSQL server on loopback; :func:`sparklink.testing.kafka.start_kafka`
  Apache Kafka's own broker (one KRaft node; :func:`~sparklink.testing.kafka.start_tansu`: Tansu).
* :class:`StandaloneCluster` (:mod:`sparklink.testing.cluster`): a master and workers on loopback.
* :mod:`sparklink.testing.chaos`: the long soak behind ``make chaos``.
* :mod:`sparklink.testing.conformance`: the exactly-once conformance suite as abstract pytest
  classes to subclass for a connector; :mod:`sparklink.testing.fixtures` is its pytest plugin.
"""

from sparklink.testing.drivers import KILLED, DriverProcess, DriverResult, logged_batches, run_driver
from sparklink.testing.postgres import PostgresServer, postgres_bin_dir, start_postgres
from sparklink.testing.spark_session import SHORT_LIVED_DRIVER_CONF, error_text, spark_session

__all__ = ["KILLED", "SHORT_LIVED_DRIVER_CONF", "DriverProcess", "DriverResult", "PostgresServer", "error_text", "logged_batches", "postgres_bin_dir",
           "run_driver", "spark_session", "start_postgres"]
