"""Retrieval's candidate reads (service/retrieval/repository.py) on SQLite and
PostgreSQL: candidates with their vectors, filtered by kind, status, environment,
agent, policy and time, with the leakage guards (tasks and trajectories excluded
through the evidence)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import numpy as np
from sqlalchemy.dialects.postgresql.psycopg import dialect as psycopg_dialect
from sqlalchemy.dialects.sqlite import dialect as sqlite_dialect
from sqlalchemy.engine import Dialect

from domain.hashing import task_hash
from service.retrieval import repository as repo
from service.retrieval.repository import CandidateFilters
from store.database import Database
from tests.factories import CITED_MODEL, unit

ALL = CandidateFilters(kinds=["exemplar", "heuristic"], statuses=["candidate", "active"])


def candidates(
    cited_db: Database, cited_pks: dict[str, int], f: CandidateFilters = ALL, model: str = CITED_MODEL
) -> set[str]:
    with cited_db.read() as s:
        return {c.id for c in repo.list_candidates(s, "mem", list(cited_pks.values()), f, model)}


def test_candidates_carry_their_fields_and_vectors(cited_db: Database, cited_pks: dict[str, int]) -> None:
    # "bare" has no vector of this model and "far" lives in another namespace.
    assert candidates(cited_db, cited_pks) == {"tea", "coffee", "both"}
    with cited_db.read() as s:
        [coffee] = repo.list_candidates(s, "mem", [cited_pks["coffee"]], ALL, CITED_MODEL)
        assert (coffee.pk, coffee.kind, coffee.status, coffee.version, coffee.environment) == (
            cited_pks["coffee"],
            "exemplar",
            "active",
            1,
            "house",
        )
        assert coffee.content == {"a": [1]} and coffee.text == "text of coffee"
        assert (coffee.uses, coffee.successes, coffee.failures) == (0, 0, 0)
        assert set(coffee.vectors) == {"state", "internal"}
        assert np.allclose(coffee.vectors["state"], unit(0, 1, 0)) and coffee.vectors["state"].dtype == np.float32
        assert np.allclose(coffee.vectors["internal"], unit(0, 0, 1))
        assert repo.list_candidates(s, "mem", [], ALL, CITED_MODEL) == []
    assert candidates(cited_db, cited_pks, model="another-model") == {"bare"}


def test_candidate_filters_and_leakage_guards(cited_db: Database, cited_pks: dict[str, int]) -> None:
    assert candidates(cited_db, cited_pks, replace(ALL, kinds=["exemplar"])) == {"tea", "coffee"}
    assert candidates(cited_db, cited_pks, replace(ALL, kinds=["skill"])) == set()
    assert candidates(cited_db, cited_pks, replace(ALL, statuses=["active"])) == {"tea", "coffee"}
    assert candidates(cited_db, cited_pks, replace(ALL, statuses=["candidate"])) == {"both"}
    assert candidates(cited_db, cited_pks, replace(ALL, environment="garden")) == {"both"}
    assert candidates(cited_db, cited_pks, replace(ALL, environment="elsewhere")) == set()
    # Agent and policy: some cited trajectory must match.
    assert candidates(cited_db, cited_pks, replace(ALL, agent="bob")) == {"coffee", "both"}
    assert candidates(cited_db, cited_pks, replace(ALL, policy_version="v1")) == {"tea", "both"}
    assert candidates(cited_db, cited_pks, replace(ALL, agent="carol")) == set()
    # Leakage guards: anything distilled from an excluded task or trajectory is out.
    assert candidates(cited_db, cited_pks, replace(ALL, exclude_task_hashes=[task_hash("make tea")])) == {"coffee"}
    assert candidates(cited_db, cited_pks, replace(ALL, exclude_task_hashes=[task_hash("make cocoa")])) == {
        "tea",
        "coffee",
        "both",
    }
    assert candidates(cited_db, cited_pks, replace(ALL, exclude_trajectory_ids=["coffee"])) == {"tea"}
    assert candidates(cited_db, cited_pks, replace(ALL, exclude_trajectory_ids=["nope"])) == {"tea", "coffee", "both"}
    # Only what existed at `as_of`.
    assert candidates(cited_db, cited_pks, replace(ALL, as_of=datetime(2024, 6, 1, tzinfo=UTC))) == {"tea"}
    assert candidates(cited_db, cited_pks, replace(ALL, as_of=datetime(2023, 1, 1, tzinfo=UTC))) == set()


def test_a_filter_value_longer_than_its_column_is_not_cut_short(cited_db: Database, cited_pks: dict[str, int]) -> None:
    # PostgreSQL binds each list as one array; cast to the column's VARCHAR(16)[] the
    # value below would be cut to "make tea"'s hash and hide "tea" and "both".
    longer = task_hash("make tea") + "0"
    assert candidates(cited_db, cited_pks, replace(ALL, exclude_task_hashes=[longer])) == {"tea", "coffee", "both"}


def test_on_postgresql_a_list_is_one_parameter() -> None:
    """The candidate read's text does not change with the number of pks on PostgreSQL
    (so psycopg prepares it after five runs); SQLite takes a list as one parameter per
    value."""
    filters = replace(ALL, exclude_task_hashes=["a", "b"], exclude_trajectory_ids=["t"])

    def text(dialect: Dialect, pks: list[int]) -> str:
        stmt = repo._candidate_statement(dialect.name == "postgresql", False, False, False, False, False, True, True)
        params = {
            "pks": pks,
            "namespace": "mem",
            "kinds": list(filters.kinds),
            "statuses": list(filters.statuses),
            "model": "m",
            "task_hashes": list(filters.exclude_task_hashes),
            "trajectory_ids": list(filters.exclude_trajectory_ids),
        }
        return stmt.compile(dialect=dialect).construct_expanded_state(params).statement

    pg = psycopg_dialect()
    assert text(pg, [1, 2, 3]) == text(pg, list(range(60)))
    assert "ANY" in text(pg, [1])
    lite = sqlite_dialect()
    assert text(lite, [1, 2, 3]) != text(lite, list(range(60)))
