"""Migrations are the only way the schema is made: one head, upgrade from empty,
the migrated schema equals the ORM metadata, and down/up round-trips with data."""

from __future__ import annotations

from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import create_engine, inspect, text

from migrations import downgrade, heads, include_name, schema_status, upgrade
from store.database import create_db_engine
from store.models import Base


def test_single_head() -> None:
    assert len(heads()) == 1


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def empty_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'sub' / 'dir' / 'reflexa.db'}"  # directories made on upgrade
    return request.getfixturevalue("pg_databases").create()


def test_upgrade_from_empty_matches_orm_metadata(empty_url: str) -> None:
    engine = create_db_engine(empty_url)
    assert not schema_status(engine).up_to_date
    upgrade(empty_url)
    assert schema_status(engine).up_to_date
    with engine.connect() as conn:
        opts = {"compare_type": True, "include_name": include_name}
        diffs = compare_metadata(MigrationContext.configure(conn, opts=opts), Base.metadata)
    engine.dispose()
    assert diffs == []


def test_downgrade_then_upgrade_again(empty_url: str) -> None:
    upgrade(empty_url)
    engine = create_engine(empty_url)
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO namespaces (name, settings, created_at) VALUES ('n', '{}', CURRENT_TIMESTAMP)"))
    downgrade(empty_url, "base")
    assert "trajectories" not in inspect(engine).get_table_names()
    upgrade(empty_url)
    assert {"namespaces", "trajectories", "steps", "jobs", "reflections"} <= set(inspect(engine).get_table_names())
    engine.dispose()


def test_outcome_counters_are_backfilled(empty_url: str) -> None:
    """0002 moves the utility baseline onto the namespace row: outcomes recorded
    before it are counted (those without a success value are not)."""
    upgrade(empty_url, "0001")
    engine = create_engine(empty_url)
    with engine.begin() as conn:
        for ns in ("a", "b"):
            conn.execute(
                text("INSERT INTO namespaces (name, settings, created_at) VALUES (:n, '{}', CURRENT_TIMESTAMP)"),
                {"n": ns},
            )
        for i, (ns, success) in enumerate([("a", True), ("a", False), ("a", True), ("a", None), ("b", False)]):
            conn.execute(
                text(
                    "INSERT INTO retrievals (id, namespace, query, created_at)"
                    " VALUES (:id, :ns, '{}', CURRENT_TIMESTAMP)"
                ),
                {"id": f"r{i}", "ns": ns},
            )
            conn.execute(
                text(
                    "INSERT INTO retrieval_outcomes (retrieval_id, success, created_at)"
                    " VALUES (:id, :s, CURRENT_TIMESTAMP)"
                ),
                {"id": f"r{i}", "s": success},
            )
    upgrade(empty_url)
    with engine.connect() as conn:
        rows = conn.execute(text("SELECT name, outcome_successes, outcome_total FROM namespaces ORDER BY name"))
        assert [tuple(r) for r in rows] == [("a", 2, 3), ("b", 0, 1)]
    downgrade(empty_url, "0001")  # and back: nothing that references a namespace is lost either way
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM retrieval_outcomes")).scalar() == 5
    engine.dispose()
