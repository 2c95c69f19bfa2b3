"""Retrieval's candidate reads (service/retrieval/repository.py) on SQLite and
PostgreSQL: candidates with their vectors, filtered by kind, status, environment,
agent, policy and time, with the leakage guards (tasks and trajectories excluded
through the evidence)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import numpy as np

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
