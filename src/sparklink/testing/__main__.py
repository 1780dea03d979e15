"""``python -m sparklink.testing module:function '<json args>'``: run one job in this process
(the driver process a test starts and may SIGKILL; see :mod:`sparklink.testing.drivers`)."""

import sys

from sparklink.testing.drivers import run_job

sys.exit(run_job(sys.argv))
