"""The chaos soak, short: a continuous pipeline (file source -> file sink and PostgreSQL
two-phase sink) SIGKILLed at random moments, then drained. `make chaos` runs the long one."""

import pytest

from sparklink.testing.chaos import run_chaos


@pytest.mark.slow
def test_short_chaos_soak_loses_and_duplicates_nothing(postgres, tmp_path, spark, driver_class_archive):
    """1 kill on commit-log progress (the soak's machinery; `make chaos` runs 20); the run that
    drains everything runs in the test's session."""
    result = run_chaos(kills=1, work=tmp_path, dsn=postgres.dsn, min_batches=1, max_batches=2, jitter=1.0,
                       rows_per_file=100, interval=0.4, seed=11, log=print, spark=spark)
    assert result["kills"] == 1
    assert result["records_in"] > 0
    for name, figures in result["sinks"].items():
        assert figures == {"out": result["records_in"], "duplicated": 0, "lost": 0}, name
    assert result["prepared_left"] == 0
