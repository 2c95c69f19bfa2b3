"""Per-namespace settings (domain/settings.py): stored settings are read back with
today's defaults filled in (old rows lack newer fields), stored numbers coerced,
thresholds checked; read_settings reads a namespace's row in a real store."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from domain.settings import NamespaceSettings, parse_settings
from service.namespaces.stored import read_settings
from store.models import Namespace, utcnow
from tests.factories import make_db


def test_an_empty_stored_dict_is_all_defaults() -> None:
    got = parse_settings({})
    assert got == NamespaceSettings()
    assert got.gamma == 0.95
    assert (got.state_text.fields, got.state_text.max_chars) == (["observation", "data"], 2000)
    assert (got.ranking.internal_weight, got.ranking.utility_weight) == (0.3, 0.5)
    assert (got.reflection.contrastive.min_support, got.reflection.evidence_cards.groups) == (5, 3)
    assert got.reflection.llm.reflectors == ["heuristics", "skills", "rubrics", "golden_negatives"]


def test_an_old_stored_dict_keeps_its_values_and_gains_the_new_defaults() -> None:
    stored = {
        "gamma": 0.5,
        "state_text": {"fields": ["task", "observation"]},
        "reflection": {"llm": {"enabled": False}},
    }
    got = parse_settings(stored)
    assert got.gamma == 0.5 and got.state_text.fields == ["task", "observation"]
    assert got.state_text.max_chars == 2000  # absent from the stored state_text: the default
    assert got.reflection.llm.enabled is False and got.reflection.llm.dedup_similarity == 0.92
    assert got.ranking == NamespaceSettings().ranking and got.reflection.contrastive.enabled is True
    assert stored == {  # the stored dict is not changed
        "gamma": 0.5,
        "state_text": {"fields": ["task", "observation"]},
        "reflection": {"llm": {"enabled": False}},
    }


def test_stored_numbers_are_coerced_and_bounds_still_hold() -> None:
    got = parse_settings({"gamma": 1, "ranking": {"recency_half_life_days": 7}})
    assert got.gamma == 1.0 and isinstance(got.gamma, float)
    assert got.ranking.recency_half_life_days == 7.0
    with pytest.raises(ValidationError, match="gamma"):
        parse_settings({"gamma": 2})
    with pytest.raises(ValidationError, match="maintenance_similarity must not exceed dedup_similarity"):
        parse_settings({"reflection": {"llm": {"dedup_similarity": 0.8, "maintenance_similarity": 0.9}}})


def test_read_settings_reads_the_namespace_row(database_url: str) -> None:
    db = make_db(database_url, "plain")
    try:
        with db.write() as s:
            s.add(Namespace(name="tuned", settings={"gamma": 0.25}, created_at=utcnow()))
        with db.read() as s:
            assert read_settings(s, "tuned").gamma == 0.25
            assert read_settings(s, "plain") == NamespaceSettings()
            assert read_settings(s, "gone") == NamespaceSettings()  # deleted meanwhile: the defaults
    finally:
        db.dispose()
