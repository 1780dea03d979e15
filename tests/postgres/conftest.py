"""Fixtures of the PostgreSQL tests (the shared server ``postgres`` is the harness plugin's, sparklink.testing.fixtures)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def postgres_without_prepared_transactions():
    """A second private server started with max_prepared_transactions = 0 (for one module)."""
    from sparklink.testing import start_postgres

    server = start_postgres(max_prepared_transactions=0)
    yield server
    server.stop()
