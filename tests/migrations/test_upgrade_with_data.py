"""An upgrade keeps meaning: a database filled at every earlier schema revision with
representative rows (a namespace, a key, a closed trajectory with steps, an exemplar
with evidence, history, vectors and utility, its change-feed entry, a job, logged
retrievals with their items and outcomes) is upgraded to head; every row and column
it had is unchanged, the backfilled counters agree with the rows, and the app on the
upgraded database authenticates the key, reads everything and retrieves the
exemplar for its own state (after `reflexa reindex`, an exact match, also under the
internal state of the step it cites). Both engines."""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from alembic.script import ScriptDirectory
from fastapi.testclient import TestClient
from sqlalchemy import Engine, MetaData, create_engine, inspect, select, text
from sqlalchemy.orm import Session

from domain.hashing import task_hash, text_hash
from domain.settings import StateTextSettings
from domain.state_text import state_text
from migrations import HERE, downgrade, upgrade
from reflectors.reindex import rebuild_internal_hashes, reindex
from service.app import create_app
from store import lexical
from store.database import Database
from store.embedding import build_embedder
from store.models import Reflection
from tests.conftest import make_settings

NS = "legacy"
KEY = "rfx_legacy_agent_key"
OBS = "You are in a kitchen. A red key lies on the table."
TASK = "find the key"
T0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)


def _revisions_before_head() -> list[str]:
    script = ScriptDirectory(str(HERE))
    ordered = [r.revision for r in script.walk_revisions()][::-1]  # base first
    return ordered[:-1]


#: Rows to insert, by table name.
Rows = dict[str, list[dict[str, Any]]]


def _rows(vector: bytes, model: str, dim: int) -> Rows:
    """Rows with every column any revision has; each revision gets the columns it knows."""
    content = {"observation": OBS, "action": "take red key", "result": "ok", "reward": 1.0}
    return {
        "namespaces": [
            {
                "name": NS,
                "settings": {"gamma": 0.9},
                "created_at": T0,
                "outcome_successes": 1,
                "outcome_total": 2,
                "frozen": False,
            }
        ],
        "api_keys": [
            {
                "id": "key_legacy",
                "key_hash": hashlib.sha256(KEY.encode()).hexdigest(),
                "role": "agent",
                "namespaces": [NS],
                "description": "from before",
                "created_at": T0,
            }
        ],
        "trajectories": [
            {
                "pk": 1,
                "namespace": NS,
                "id": "t1",
                "task": TASK,
                "task_hash": task_hash(TASK),
                "environment": "grid",
                "agent": "bot",
                "policy_version": "v1",
                "group_id": "g1",
                "metadata": {"seed": 7},
                "retrieval_ids": ["r1", "r2"],
                "status": "closed",
                "success": True,
                "reward": 1.0,
                "failure_reason": None,
                "outcome_details": None,
                "step_count": 2,
                "request_hash": "a" * 64,
                "created_by": "key_legacy",
                "created_at": T0,
                "updated_at": T0,
                "closed_at": T0 + timedelta(seconds=5),
            }
        ],
        "steps": [
            {
                "trajectory_pk": 1,
                "index": i,
                "observation": OBS if i == 0 else "You hold the key.",
                "state_data": None,
                "internal_state": "get the key",
                "action": "take red key" if i == 0 else "open door",
                "result": "ok",
                "error": None,
                "reward": float(i),
                "done": i == 1,
                "truncated": False,
                "caused_failure": False,
                "metadata": None,
                "content_hash": f"{i}" * 64,
                "created_at": T0,
            }
            for i in range(2)
        ],
        "reflections": [
            {
                "pk": 1,
                "namespace": NS,
                "id": "ex_legacy",
                "kind": "exemplar",
                "status": "active",
                "version": 1,
                "content": content,
                "text": f"State: {OBS} Action: take red key",
                "environment": "grid",
                "task": TASK,
                "reflector": "exemplar",
                "reflector_version": "1",
                "model": None,
                "evidence_count": 1,
                "evidence_successes": 1,
                "evidence_failures": 0,
                "evidence_value": 1.0,
                "uses": 2,
                "successes": 1,
                "failures": 1,
                "reward_sum": 1.0,
                "source_key": "t1:0",
                "created_at": T0,
                "updated_at": T0,
            }
        ],
        "reflection_evidence": [
            {"reflection_pk": 1, "trajectory_pk": 1, "step_start": 0, "step_end": 0, "success": True, "value": 1.0}
        ],
        "reflection_versions": [
            {
                "reflection_pk": 1,
                "version": 1,
                "action": "create",
                "status": "active",
                "content": content,
                "actor": "reflector:exemplar",
                "note": None,
                "created_at": T0,
            }
        ],
        "embeddings": [
            {
                "reflection_pk": 1,
                "namespace": NS,
                "kind": "exemplar",
                "field": "state",
                "model": model,
                "dim": dim,
                "vector": vector,
                "created_at": T0,
            }
        ],
        "index_changes": [{"namespace": NS, "kind": "exemplar", "reflection_pk": 1, "op": "upsert", "created_at": T0}],
        "jobs": [
            {
                "namespace": NS,
                "kind": "trajectory.closed",
                "payload": {"trajectory_pk": 1},
                "dedup_key": "closed:1",
                "status": "done",
                "priority": 10,
                "attempts": 1,
                "max_attempts": 5,
                "run_after": T0,
                "created_at": T0,
                "updated_at": T0,
                "finished_at": T0,
            }
        ],
        "retrievals": [
            {
                "id": rid,
                "namespace": NS,
                "query": {"state": {"observation": OBS}, "k": 5},
                "trajectory_id": "t1",
                "created_at": T0,
            }
            for rid in ("r1", "r2")
        ],
        "retrieval_items": [
            {"retrieval_id": rid, "reflection_pk": 1, "rank": 0, "score": 0.9, "similarity": 0.95}
            for rid in ("r1", "r2")
        ],
        "retrieval_outcomes": [
            {
                "retrieval_id": "r1",
                "success": True,
                "reward": 1.0,
                "details": None,
                "trajectory_id": "t1",
                "created_at": T0,
            },
            {
                "retrieval_id": "r2",
                "success": False,
                "reward": 0.0,
                "details": None,
                "trajectory_id": "t1",
                "created_at": T0,
            },
        ],
    }


def _snapshot(url: str, tables: MetaData) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of the tables as the old revision knew them (its columns, its types)."""
    engine = create_engine(url)
    out = {}
    with engine.connect() as conn:
        for name, table in tables.tables.items():
            if name == "alembic_version":
                continue
            rows = conn.execute(select(table).order_by(*table.primary_key.columns)).all()
            out[name] = [tuple(r) for r in rows]
    engine.dispose()
    return out


def _filled_at_head(url: str, rows: Rows) -> tuple[Engine, MetaData]:
    """The database upgraded to head with these rows in it: its engine and its tables."""
    upgrade(url)
    engine = create_engine(url)
    head = MetaData()
    head.reflect(engine)
    with engine.begin() as conn:
        for name, table_rows in rows.items():
            conn.execute(head.tables[name].insert(), table_rows)
    return engine, head


def _down_and_up_keeps_the_rest(
    url: str,
    engine: Engine,
    revision: str,
    rows: Rows,
    dropped_columns: Mapping[str, Collection[str]],
    dropped_tables: Collection[str] = (),
) -> None:
    """Down to `revision` drops exactly these columns and tables, keeps every row of
    the others, and up again changes nothing the old revision had."""
    downgrade(url, revision)
    old = MetaData()
    old.reflect(engine)
    for table, columns in dropped_columns.items():
        assert not set(columns) & set(old.tables[table].c.keys()), table
    assert not set(dropped_tables) & set(old.tables)
    before = _snapshot(url, old)
    kept = {name: table_rows for name, table_rows in rows.items() if name not in dropped_tables}
    assert {name: len(before[name]) for name in kept} == {name: len(r) for name, r in kept.items()}
    upgrade(url)
    assert _snapshot(url, old) == before


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def fresh_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'old.db'}"
    return request.getfixturevalue("pg_databases").create()


@pytest.mark.slow
@pytest.mark.parametrize("revision", _revisions_before_head())
def test_a_database_filled_at_an_earlier_revision_keeps_its_meaning(
    revision: str, fresh_url: str, tmp_path: Path
) -> None:
    embedder = build_embedder("hashing", cache_dir=tmp_path / "models")
    query = state_text(StateTextSettings(), observation=OBS, data=None, task=None)
    vector = np.asarray(embedder.encode([query])[0], dtype="<f4").tobytes()
    upgrade(fresh_url, revision)
    engine = create_engine(fresh_url)
    old = MetaData()
    old.reflect(engine)
    with engine.begin() as conn:
        for name, rows in _rows(vector, embedder.name, embedder.dim).items():
            table = old.tables[name]
            conn.execute(table.insert(), [{k: v for k, v in row.items() if k in table.c} for row in rows])
    engine.dispose()
    before = _snapshot(fresh_url, old)

    upgrade(fresh_url)

    assert _snapshot(fresh_url, old) == before  # nothing it had changed, in any column it had
    engine = create_engine(fresh_url)
    with engine.connect() as conn:  # 0017's rollup, counted from the log it had
        logged = conn.execute(text("SELECT reflection_pk, count(*) FROM retrieval_items GROUP BY reflection_pk"))
        served = conn.execute(text("SELECT reflection_pk, served FROM reflection_served"))
        if revision < "0017":  # filled later, the rollup is the writer's to keep (rows inserted here bypass it)
            assert sorted(map(tuple, served)) == sorted(map(tuple, logged)) != []
    engine.dispose()
    settings = make_settings(fresh_url, tmp_path)
    with TestClient(create_app(settings), headers={"Authorization": f"Bearer {KEY}"}) as agent:
        ns = agent.get(f"/v1/namespaces/{NS}").json()
        assert ns["settings"]["gamma"] == 0.9
        t = agent.get(f"/v1/namespaces/{NS}/trajectories/t1").json()
        assert (t["step_count"], t["outcome"]["success"], [s["action"] for s in t["steps"]]) == (
            2,
            True,
            ["take red key", "open door"],
        )
        r = agent.get(f"/v1/namespaces/{NS}/reflections/ex_legacy").json()
        assert r["utility"] == {"uses": 2, "successes": 1, "failures": 1, "reward_sum": 1.0}
        assert r["evidence"] == [{"trajectory_id": "t1", "step_start": 0, "step_end": 0}]
        served = agent.post(f"/v1/namespaces/{NS}/retrieve", json={"state": {"observation": OBS}, "k": 3}).json()
        assert served["items"][0]["id"] == "ex_legacy"
        assert served["items"][0]["utility"]["baseline"] == pytest.approx(0.5)  # 1 of 2 outcomes, backfilled or kept
        # What docs/operations.md says to run after an upgrade past 0005/0006/0010.
        services = agent.app.state.services  # type: ignore[attr-defined]
        reindex(services.db, services.embedder, services.registry, [NS])
        served = agent.post(f"/v1/namespaces/{NS}/retrieve", json={"state": {"observation": OBS}, "k": 3}).json()
        assert served["items"][0]["id"] == "ex_legacy" and served["items"][0]["exact_match"] is True
        # Past 0010 too: under the internal state of the step its evidence cites (it has
        # no internal vector: only the occurrence's hash, filled in from the step, says so).
        body = {"state": {"observation": OBS}, "internal_state": "get the key", "k": 3}
        served = agent.post(f"/v1/namespaces/{NS}/retrieve", json=body).json()
        assert served["items"][0]["id"] == "ex_legacy" and served["items"][0]["exact_match"] is True


def test_0010_downgrades_and_upgrades_with_data(fresh_url: str, tmp_path: Path) -> None:
    """Down to 0009 drops only the occurrence hashes (every other row and column
    stays); up again brings the columns back empty, and a reindex fills them in."""
    embedder = build_embedder("hashing", cache_dir=tmp_path / "models")
    rows = _rows(b"\0" * 4 * embedder.dim, embedder.name, embedder.dim)
    rows["reflection_evidence"][0]["internal_hash"] = text_hash("get the key")
    rows["reflections"][0]["internal_hashes"] = [text_hash("get the key")]
    engine, head = _filled_at_head(fresh_url, rows)
    dropped = {"reflection_evidence": ["internal_hash"], "reflections": ["internal_hashes"]}
    dropped["snapshot_reflections"] = ["internal_hashes"]
    _down_and_up_keeps_the_rest(fresh_url, engine, "0009", rows, dropped)
    with engine.connect() as conn:
        assert conn.execute(select(head.tables["reflection_evidence"].c.internal_hash)).scalars().all() == [None]
    engine.dispose()
    db = Database(fresh_url)
    try:
        assert rebuild_internal_hashes(db, NS) == 1
        with db.read() as session:
            assert session.scalars(select(Reflection.internal_hashes)).all() == [[text_hash("get the key")]]
    finally:
        db.dispose()


def test_0012_downgrades_and_upgrades_with_data(fresh_url: str, tmp_path: Path) -> None:
    """Down to 0011 drops only the steps' rollout records (every other row and column
    stays); up again brings the columns back empty, and the app reads them as null."""
    rows = _rows(b"\0" * 4 * 8, "hashing", 8)
    rows["steps"][0] |= {"policy_version": "ckpt-3", "rollout_logprobs": [-0.5, -2.25], "rollout_token_ids": [7, 9]}
    rows["steps"][1] |= {"policy_version": None, "rollout_logprobs": None, "rollout_token_ids": None}
    engine, head = _filled_at_head(fresh_url, rows)
    with engine.connect() as conn:
        stored = conn.execute(select(head.tables["steps"].c.rollout_logprobs).order_by("index")).scalars().all()
    assert stored == [[-0.5, -2.25], None]
    dropped = {"steps": ["policy_version", "rollout_logprobs", "rollout_token_ids"]}
    _down_and_up_keeps_the_rest(fresh_url, engine, "0011", rows, dropped)
    engine.dispose()
    settings = make_settings(fresh_url, tmp_path)
    with TestClient(create_app(settings), headers={"Authorization": f"Bearer {KEY}"}) as agent:
        steps = agent.get(f"/v1/namespaces/{NS}/trajectories/t1").json()["steps"]
    assert [(s["policy_version"], s["rollout_logprobs"], s["rollout_token_ids"]) for s in steps] == [(None,) * 3] * 2


def test_0016_downgrades_and_upgrades_with_data(fresh_url: str, tmp_path: Path) -> None:
    """Down to 0015 drops only the keys' last use and the settings history (every other
    row and column stays); up again brings them back empty."""
    rows = _rows(b"\0" * 4 * 8, "hashing", 8)
    rows["api_keys"][0]["last_used_at"] = T0
    rows["namespace_setting_changes"] = [
        {"namespace": NS, "path": "gamma", "old_value": 0.95, "new_value": 0.9, "actor": "key:x", "created_at": T0}
    ]
    engine, head = _filled_at_head(fresh_url, rows)
    dropped = {"api_keys": ["last_used_at"]}
    _down_and_up_keeps_the_rest(fresh_url, engine, "0015", rows, dropped, ["namespace_setting_changes"])
    with engine.connect() as conn:
        assert conn.execute(select(head.tables["api_keys"].c.last_used_at)).scalars().all() == [None]
        assert conn.execute(select(head.tables["namespace_setting_changes"])).all() == []
    engine.dispose()


def test_0019_stores_each_lexical_texts_keys_and_keeps_the_full_text_index(fresh_url: str) -> None:
    """Up to 0019 fills in every stored lexical text's feature keys (in chunks: more
    rows than one), and the engine's full-text index still finds each text by its
    words, and an edited text by its new words only; down to 0018 drops only the
    keys, and up again fills them in again."""
    rows = _rows(b"\0" * 4 * 8, "hashing", 8)
    template = rows["reflections"][0]
    n = 2_100  # more than the migration's chunk of 2,000
    rows["reflections"] = [template | {"pk": pk, "id": f"ex_{pk}"} for pk in range(1, n + 1)]
    for name in ("reflection_evidence", "reflection_versions", "embeddings", "index_changes", "retrieval_items"):
        rows.pop(name, None)
    texts = {pk: f"You are in room {pk}. A red key lies on the table." for pk in range(1, n + 1)}
    rows["lexical_texts"] = [
        {"reflection_pk": pk, "namespace": NS, "kind": "exemplar", "text": t} for pk, t in texts.items()
    ]
    upgrade(fresh_url, "0018")
    engine = create_engine(fresh_url)
    old = MetaData()
    old.reflect(engine)
    with engine.begin() as conn:
        for name, table_rows in rows.items():
            table = old.tables[name]
            conn.execute(table.insert(), [{k: v for k, v in row.items() if k in table.c} for row in table_rows])
    before = _snapshot(fresh_url, old)

    def keys_and_matches() -> tuple[dict[int, bytes | None], list[int]]:
        with Session(engine) as session:
            keys = {pk: blob for pk, blob in session.execute(text("SELECT reflection_pk, keys FROM lexical_texts"))}
            found = [pk for pk, _ in lexical.list_lexical_matches(session, NS, ["exemplar"], "room 2077", 5)]
        return keys, found

    upgrade(fresh_url)
    assert _snapshot(fresh_url, old) == before  # nothing else changed
    keys, found = keys_and_matches()
    assert keys == {pk: lexical.keys_blob(lexical.text_keys(t)) for pk, t in texts.items()}
    assert found[0] == 2077
    with engine.begin() as conn:  # an edit: the full-text index follows the new words
        conn.execute(text("UPDATE lexical_texts SET text = 'A blue door.' WHERE reflection_pk = 2077"))
    assert keys_and_matches()[1][:1] != [2077]
    with Session(engine) as session:
        assert [pk for pk, _ in lexical.list_lexical_matches(session, NS, ["exemplar"], "blue door", 5)] == [2077]

    downgrade(fresh_url, "0018")
    assert "keys" not in {c["name"] for c in inspect(engine).get_columns("lexical_texts")}
    upgrade(fresh_url)
    keys, _ = keys_and_matches()
    assert keys[2077] == lexical.keys_blob(lexical.text_keys("A blue door."))
    assert all(blob is not None for blob in keys.values())
    engine.dispose()
