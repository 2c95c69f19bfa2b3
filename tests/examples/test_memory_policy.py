"""The memory policy acts on the server's ranking: its exact matches first (this very
situation before the same state elsewhere), then the top-ranked look-alikes; values
by return-to-go, ties by rank, never an action whose evidence is mostly failures."""

from __future__ import annotations

import random
from datetime import UTC, datetime
from typing import Any

import pytest
from reflexa.models import RetrievedItem

from examples.common.memory_policy import MemoryParams, choose, evidence_by_action, nearest
from examples.common.rules import EpisodeRules

HERE = {"episode_start": "aaaa"}
ELSEWHERE = {"episode_start": "bbbb"}
PARAMS = MemoryParams()


def item(
    action: str,
    *,
    score: float,
    similarity: float | None = None,
    exact: bool = False,
    data: dict[str, Any] | None = None,
    rtg: float = 0.5,
    successes: int = 1,
    failures: int = 0,
    count: int = 1,
) -> RetrievedItem:
    now = datetime.now(UTC)
    sim = similarity if similarity is not None else min(score, 1.0)
    return RetrievedItem.model_validate(
        {
            "id": f"ex_{action}_{score}_{exact}",
            "kind": "exemplar",
            "status": "active",
            "version": 1,
            "content": {
                "observation": "a room",
                "state_data": data,
                "action": action,
                "count": count,
                "success_count": successes,
                "failure_count": failures,
                "return_to_go": rtg,
            },
            "text": f"State: a room\nAction: {action}",
            "score": score,
            "similarity": sim,
            "exact_match": exact,
            "state_similarity": sim,
            "utility": {"mean": 0.5, "std": 0.2, "uses": 0, "successes": 0, "failures": 0, "baseline": 0.5},
            "evidence": [],
            "evidence_count": count,
            "created_at": now,
            "updated_at": now,
        }
    )


def test_this_very_situation_comes_first_then_the_same_state_elsewhere() -> None:
    ranked = [
        item("go west", score=1.07, exact=True, data=ELSEWHERE),
        item("go east", score=1.04, exact=True, data=HERE),
        item("go north", score=0.99),
    ]
    same, level = nearest(ranked, PARAMS, HERE)
    assert level == "same" and [i.content["action"] for i in same] == ["go east"]
    elsewhere, level = nearest(ranked, PARAMS, {"episode_start": "cccc"})
    assert level == "state" and [i.content["action"] for i in elsewhere] == ["go west", "go east"]


def test_exactness_is_the_servers_flag_not_a_similarity_threshold() -> None:
    """A look-alike at cosine 0.9995 is not "this state"; only exact_match says so."""
    ranked = [item("go east", score=1.01, similarity=0.9995, data=HERE), item("go west", score=0.995, data=HERE)]
    near, level = nearest(ranked, PARAMS, HERE)
    assert level == "near" and [i.content["action"] for i in near] == ["go east", "go west"]


def test_look_alikes_are_the_top_ranked_within_the_margin() -> None:
    ranked = [
        item("go east", score=0.95),
        item("go west", score=0.94),
        item("go north", score=0.90),  # more than the margin below the first
        item("go south", score=0.93, similarity=0.7),  # too dissimilar to count
    ]
    near, level = nearest(ranked, PARAMS, HERE)
    assert level == "near" and [i.content["action"] for i in near] == ["go east", "go west"]
    assert nearest([item("go east", score=0.6)], PARAMS, HERE) == ([], "none")
    assert nearest([], PARAMS, HERE) == ([], "none")


def test_value_is_return_to_go_and_rank_breaks_ties() -> None:
    items = [
        item("go west", score=1.07, exact=True, data=HERE, rtg=0.5),
        item("go east", score=1.03, exact=True, data=HERE, rtg=0.5),
        item("go north", score=1.02, exact=True, data=HERE, rtg=0.2, count=3),
    ]
    evidence = evidence_by_action(items, ("go west", "go east", "go north", "go south"))
    assert evidence["go north"].count == 3 and evidence["go north"].value == pytest.approx(0.2)
    assert [evidence[a].rank for a in ("go west", "go east", "go north")] == [0, 1, 2]
    rules = EpisodeRules(random.Random(0))
    actions = ("go east", "go north", "go south", "go west")
    assert choose(evidence, rules, "a room", actions, PARAMS, exact=True) == ("go west", "memory")


def test_an_action_whose_evidence_is_mostly_failures_is_never_taken() -> None:
    items = [
        item("eat meal", score=1.07, exact=True, data=HERE, rtg=0.9, successes=1, failures=2),
        item("go east", score=1.03, exact=True, data=HERE, rtg=0.0, successes=0, count=4),
    ]
    evidence = evidence_by_action(items, ("eat meal", "go east", "go west"))
    rules = EpisodeRules(random.Random(0))
    # Nothing rewarding left: explore, and in this very state prefer the action
    # least tried here in past episodes (go west: never), not the failed one.
    assert choose(evidence, rules, "a room", ("eat meal", "go east", "go west"), PARAMS, exact=True) == (
        "go west",
        "explore",
    )
