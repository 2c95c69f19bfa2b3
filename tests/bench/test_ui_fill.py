"""bench/ui/fill.py at a tiny size: the counts it promises, the consistency a real
store has (evidence statistics, foreign keys, utility and namespace counters summed
from the outcomes, the hashes ingest computes), and a real app that serves it."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, text

from bench.ui.fill import (
    ITEMS_PER_RETRIEVAL,
    STEPS_PER_TRAJECTORY,
    FillReport,
    fill,
    other_sizes,
    sizes_for,
)
from domain.settings import NamespaceSettings
from service.app import create_app
from service.retrieval.schemas import RetrieveRequest
from service.trajectories import ingest
from service.trajectories.schemas import StepCreate, TrajectoryCreate
from tests.conftest import ADMIN_KEY, make_settings

STEPS, REFLECTIONS = 800, 150
MODEL, DIM = "hashing-256", 256  # the tests' model-free embedder, so the app can search what was stored
NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
CREDITED_RANKS = NamespaceSettings().credit.unnamed_top_k  # the fill's namespaces keep the default
EXCEPTION_LINE = re.compile(r"[A-Za-z_][\w.]*: \S")  # what traceback.format_exception_only starts with


@pytest.fixture(scope="module")
def filled(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, FillReport, Path]:
    tmp = tmp_path_factory.mktemp("ui_fill")
    url = f"sqlite:///{tmp / 'ui.db'}"
    report = fill(url, steps=STEPS, reflections=REFLECTIONS, seed=3, model=MODEL, dim=DIM, now=NOW, log=lambda _: None)
    return url, report, tmp


def rows(url: str, sql: str) -> list[tuple]:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return [tuple(r) for r in conn.execute(text(sql))]
    finally:
        engine.dispose()


def test_counts_are_the_promised_sizes(filled: tuple[str, FillReport, Path]) -> None:
    _, report, _ = filled
    bench, other = sizes_for(STEPS, REFLECTIONS), other_sizes(STEPS, REFLECTIONS)
    assert report.namespaces["bench"] == {
        "trajectories": STEPS // STEPS_PER_TRAJECTORY,
        "steps": STEPS,
        "reflections": REFLECTIONS,
        "retrievals": bench.retrievals,
        "jobs": bench.jobs_done + bench.jobs_failed + bench.jobs_queued,
    }
    assert report.namespaces["other"]["steps"] == other.steps
    assert report.namespaces["other"]["reflections"] == other.reflections
    c = report.counts
    assert c["namespaces"] == 2
    assert c["retrieval_items"] == ITEMS_PER_RETRIEVAL * c["retrievals"]
    assert 0.3 < c["retrieval_outcomes"] / c["retrievals"] < 0.7
    assert c["index_changes"] == c["reflections"]
    assert report.seconds > 0 and report.peak_rss_mb > 0


def test_jobs_by_status_and_failed_ones_carry_an_error(filled: tuple[str, FillReport, Path]) -> None:
    url, _, _ = filled
    bench = sizes_for(STEPS, REFLECTIONS)
    by_status = dict(rows(url, "SELECT status, COUNT(*) FROM jobs WHERE namespace = 'bench' GROUP BY status"))
    assert by_status == {"done": bench.jobs_done, "failed": bench.jobs_failed, "queued": bench.jobs_queued}
    failed = rows(url, "SELECT attempts, max_attempts, last_error, finished_at FROM jobs WHERE status = 'failed'")
    # as the worker writes it: the exception first (`module.Class: message`; the class
    # need not be named ...Error, e.g. LLMUnavailable)
    assert failed and all(a == m and fin and EXCEPTION_LINE.match(err) for a, m, err, fin in failed)
    # the partial unique index holds: one queued job per dedup key
    assert not rows(url, "SELECT dedup_key FROM jobs WHERE status = 'queued' GROUP BY dedup_key HAVING COUNT(*) > 1")


def test_evidence_statistics_match_the_evidence_rows(filled: tuple[str, FillReport, Path]) -> None:
    url, _, _ = filled
    mismatched = rows(
        url,
        """SELECT r.pk FROM reflections r JOIN (
               SELECT reflection_pk, COUNT(*) n, SUM(success IS 1) s, SUM(success IS 0) f, AVG(value) v
               FROM reflection_evidence GROUP BY reflection_pk) e ON e.reflection_pk = r.pk
           WHERE r.evidence_count != e.n OR r.evidence_successes != e.s OR r.evidence_failures != e.f
              OR ABS(COALESCE(r.evidence_value, -1) - COALESCE(e.v, -1)) > 1e-9""",
    )
    assert mismatched == []
    per = rows(url, "SELECT MIN(evidence_count), MAX(evidence_count), SUM(evidence_count) FROM reflections")[0]
    assert per[0] >= 1 and per[1] <= 3
    assert per[2] == rows(url, "SELECT COUNT(*) FROM reflection_evidence")[0][0]


def test_every_reference_points_at_a_row_of_the_same_namespace(filled: tuple[str, FillReport, Path]) -> None:
    url, _, _ = filled
    assert rows(url, "PRAGMA foreign_key_check") == []
    assert not rows(
        url,
        """SELECT e.pk FROM reflection_evidence e JOIN reflections r ON r.pk = e.reflection_pk
           LEFT JOIN trajectories t ON t.pk = e.trajectory_pk
           WHERE t.pk IS NULL OR t.namespace != r.namespace
              OR (e.step_start IS NOT NULL AND (e.step_start < 0 OR e.step_end >= t.step_count
                                                OR e.step_end < e.step_start))""",
    )
    assert not rows(
        url,
        """SELECT i.pk FROM retrieval_items i JOIN retrievals q ON q.id = i.retrieval_id
           LEFT JOIN reflections r ON r.pk = i.reflection_pk
           WHERE r.pk IS NULL OR r.namespace != q.namespace OR r.status != 'active'
              OR r.created_at > q.created_at OR i.rank NOT BETWEEN 0 AND 4""",
    )
    assert not rows(
        url,
        """SELECT q.id FROM retrievals q LEFT JOIN trajectories t
             ON t.namespace = q.namespace AND t.id = q.trajectory_id WHERE t.pk IS NULL""",
    )
    assert not rows(
        url, "SELECT s.pk FROM steps s LEFT JOIN trajectories t ON t.pk = s.trajectory_pk WHERE t.pk IS NULL"
    )
    counts = rows(
        url, "SELECT t.step_count, COUNT(s.pk) FROM trajectories t JOIN steps s ON s.trajectory_pk = t.pk GROUP BY t.pk"
    )
    assert {c for c in counts} == {(STEPS_PER_TRAJECTORY, STEPS_PER_TRAJECTORY)}


def test_counters_are_summed_from_the_outcomes(filled: tuple[str, FillReport, Path]) -> None:
    url, _, _ = filled
    namespaces = rows(
        url,
        """SELECT n.name, n.outcome_total, n.outcome_successes, COUNT(o.retrieval_id), COALESCE(SUM(o.success), 0)
           FROM namespaces n LEFT JOIN retrievals q ON q.namespace = n.name
           LEFT JOIN retrieval_outcomes o ON o.retrieval_id = q.id AND o.success IS NOT NULL GROUP BY n.name""",
    )
    assert len(namespaces) == 2 and all(total == n and won == s for _, total, won, n, s in namespaces)
    # Credit as an episode's close gives it: the top CREDITED_RANKS items of each outcome.
    wrong = rows(
        url,
        f"""SELECT r.pk FROM reflections r LEFT JOIN (
               SELECT i.reflection_pk pk, COUNT(*) uses, SUM(o.success IS 1) s, SUM(o.success IS 0) f,
                      SUM(o.reward) rw
               FROM retrieval_items i JOIN retrieval_outcomes o ON o.retrieval_id = i.retrieval_id
               WHERE i.rank < {CREDITED_RANKS} GROUP BY i.reflection_pk) c ON c.pk = r.pk
           WHERE r.uses != COALESCE(c.uses, 0) OR r.successes != COALESCE(c.s, 0)
              OR r.failures != COALESCE(c.f, 0) OR ABS(r.reward_sum - COALESCE(c.rw, 0)) > 1e-6""",
    )
    assert wrong == []
    # some items sit below the namespace's baseline, some above
    ((total, won),) = rows(url, "SELECT outcome_total, outcome_successes FROM namespaces WHERE name = 'bench'")
    rates = [s / u for s, u in rows(url, "SELECT successes, uses FROM reflections WHERE uses >= 3")]
    assert any(r < won / total for r in rates) and any(r > won / total for r in rates)


def test_history_vectors_and_lexical_rows(filled: tuple[str, FillReport, Path]) -> None:
    url, _, _ = filled
    bad_history = rows(
        url,
        """SELECT r.pk FROM reflections r LEFT JOIN (
               SELECT reflection_pk, COUNT(*) n, MAX(version) v, MIN(pk) first FROM reflection_versions
               GROUP BY reflection_pk) h ON h.reflection_pk = r.pk
           LEFT JOIN reflection_versions f ON f.pk = h.first
           WHERE h.n IS NULL OR h.n > 3 OR h.v != r.version OR f.action != 'create'""",
    )
    assert bad_history == []
    assert rows(url, "SELECT DISTINCT model, dim, LENGTH(vector) FROM embeddings") == [(MODEL, DIM, 4 * DIM)]
    no_state = rows(
        url,
        "SELECT COUNT(*) FROM reflections r WHERE NOT EXISTS (SELECT 1 FROM embeddings e "
        "WHERE e.reflection_pk = r.pk AND e.field = 'state')",
    )
    assert no_state == [(0,)]
    # an exemplar with an internal state has its vector; rubric and card texts are their task
    internal = rows(
        url,
        """SELECT COUNT(*), SUM(EXISTS (SELECT 1 FROM embeddings e WHERE e.reflection_pk = r.pk
                                        AND e.field = 'internal'))
           FROM reflections r WHERE r.kind = 'exemplar' AND json_extract(r.content, '$.internal_state') IS NOT NULL""",
    )
    assert internal[0][0] > 0 and internal[0][0] == internal[0][1]
    lexical = rows(url, "SELECT kind, text FROM lexical_texts WHERE kind IN ('rubric', 'evidence_card')")
    assert lexical and all(t.startswith("Task: ") for _, t in lexical)
    found = rows(
        url,
        "SELECT COUNT(*) FROM lexical_fts JOIN lexical_texts t ON t.reflection_pk = lexical_fts.rowid "
        "WHERE lexical_fts MATCH 'task' AND t.kind IN ('rubric', 'evidence_card')",
    )
    assert found == [(len(lexical),)]  # the FTS5 triggers indexed them
    exemplars = rows(url, "SELECT content FROM reflections WHERE kind = 'exemplar'")
    assert all('"observation"' in c and '"action"' in c for (c,) in exemplars)


def test_hashes_and_logged_queries_are_what_the_api_writes(filled: tuple[str, FillReport, Path]) -> None:
    url, _, _ = filled
    import orjson

    for obs, data, internal, action, result, reward, done, digest in rows(
        url,
        """SELECT observation, state_data, internal_state, action, result, reward, done, content_hash
           FROM steps ORDER BY pk LIMIT 45""",
    ):
        step = StepCreate(
            state={"observation": obs, "data": orjson.loads(data)},
            internal_state=internal,
            action=orjson.loads(action),
            result=result,
            reward=reward,
            done=bool(done),
        )
        assert ingest.step_hash(step) == digest
    for tid, task, env, agent, policy, group, meta, digest in rows(
        url,
        "SELECT id, task, environment, agent, policy_version, group_id, metadata, request_hash FROM trajectories",
    ):
        body = TrajectoryCreate(
            id=tid, task=task, environment=env, agent=agent, policy_version=policy, group_id=group,
            metadata=orjson.loads(meta),
        )  # fmt: skip
        assert ingest.request_hash(body) == digest
    for (query,) in rows(url, "SELECT query FROM retrievals LIMIT 50"):
        stored = orjson.loads(query)
        again = RetrieveRequest.model_validate(stored).model_dump(
            mode="json", exclude={"consistency_token", "wait_timeout_ms", "render"}
        )
        assert again == stored


def test_the_same_seed_fills_the_same_database(tmp_path: Path) -> None:
    def digest(seed: int, name: str) -> list[list[tuple]]:
        url = f"sqlite:///{tmp_path / name}"
        fill(url, steps=400, reflections=60, seed=seed, model=MODEL, dim=DIM, now=NOW, log=lambda _: None)
        return [
            rows(url, "SELECT id, task, success, reward, request_hash, created_at FROM trajectories ORDER BY pk"),
            rows(url, "SELECT content_hash, created_at FROM steps ORDER BY pk"),
            rows(url, "SELECT id, kind, status, content, text, uses, successes FROM reflections ORDER BY pk"),
            rows(url, "SELECT vector, text_hash FROM embeddings ORDER BY pk"),
            rows(url, "SELECT id, query, created_at FROM retrievals ORDER BY id"),
            rows(url, "SELECT retrieval_id, reflection_pk, rank, score FROM retrieval_items ORDER BY pk"),
            rows(url, "SELECT kind, status, payload, last_error, created_at FROM jobs ORDER BY id"),
        ]

    first = digest(5, "a.db")
    assert digest(5, "b.db") == first
    assert digest(6, "c.db")[2] != first[2]


def test_refuses_a_database_that_has_the_namespaces(filled: tuple[str, FillReport, Path]) -> None:
    url, _, _ = filled
    with pytest.raises(ValueError, match="already exist"):
        fill(url, steps=STEPS, reflections=REFLECTIONS, model=MODEL, dim=DIM, log=lambda _: None)


def test_a_real_app_serves_the_filled_store(filled: tuple[str, FillReport, Path]) -> None:
    url, _, tmp = filled
    settings = make_settings(url, tmp / "data")
    with TestClient(create_app(settings), headers={"Authorization": f"Bearer {ADMIN_KEY}"}) as api:
        for path in ("trajectories", "reflections", "jobs?status=failed"):
            r = api.get(f"/v1/namespaces/bench/{path}")
            assert r.status_code == 200, r.text
            assert r.json()["items"], path
        others = api.get("/v1/namespaces/other/trajectories?limit=500").json()["items"]
        assert len(others) == other_sizes(STEPS, REFLECTIONS).trajectories
        assert {t["namespace"] for t in others} == {"other"}
        observation = rows(url, "SELECT observation FROM steps ORDER BY pk LIMIT 1")[0][0]
        r = api.post("/v1/namespaces/bench/retrieve", json={"state": {"observation": observation}, "k": 5})
        assert r.status_code == 200, r.text
        body = r.json()
        assert len(body["items"]) == 5
        # logged past the explicit keys: the next retrieval's items took fresh primary keys
        served = rows(url, f"SELECT COUNT(*) FROM retrieval_items WHERE retrieval_id = '{body['retrieval_id']}'")
        assert served == [(5,)]
