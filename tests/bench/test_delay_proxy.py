"""bench/common/delay_proxy.py carries a real PostgreSQL session unchanged: many
statements, a result larger than one chunk, an error, in order both ways."""

from __future__ import annotations

import threading

import psycopg
import pytest
from sqlalchemy.engine import make_url

from bench.common import delay_proxy
from tests.conftest import PG_ADMIN_URL


@pytest.mark.postgres
def test_a_postgres_session_through_the_proxy_is_unchanged() -> None:
    url = make_url(PG_ADMIN_URL)
    server = delay_proxy.listen(0)
    port = server.getsockname()[1]
    target = (url.host or "127.0.0.1", url.port or 5432)
    threading.Thread(target=delay_proxy.serve, args=(server, target, 0.1), daemon=True).start()
    dsn = url.set(drivername="postgresql", port=port).render_as_string(hide_password=False)
    with psycopg.connect(dsn, autocommit=True) as conn:
        for i in range(50):  # one round trip after another, each answered in turn
            assert conn.execute("SELECT %s::int * 2", (i,)).fetchone() == (2 * i,)
        big = conn.execute("SELECT repeat('ab', 300000)").fetchone()
        assert big is not None and big[0] == "ab" * 300_000  # many chunks, reassembled in order
        with pytest.raises(psycopg.errors.DivisionByZero):
            conn.execute("SELECT 1 / 0")
        assert conn.execute("SELECT 'after'").fetchone() == ("after",)
    server.close()
