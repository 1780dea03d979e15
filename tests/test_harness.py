"""The harness itself: the PostgreSQL fixture is a real server with prepared transactions."""


def test_postgres_fixture_allows_prepared_transactions(postgres):
    with postgres.connect() as conn:
        assert int(conn.execute("SHOW max_prepared_transactions").fetchone()[0]) > 0
        assert conn.execute("SELECT inet_server_addr()::text").fetchone()[0].startswith("127.0.0.1")
