"""`python -m bench.retrieval --corpus agent-states` runs the retrieval bench on the
small-vocabulary corpus (bench.retrieval.corpora), end to end at its smoke size:
the items and queries are that corpus's, the rows the bench always writes are there,
and the reproducing command names the corpus. Structure only, no timing is judged."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.retrieval import main as retrieval
from bench.retrieval.config import CMP, N_QUERIES, SMOKE
from bench.retrieval.corpora import agent_states_data

OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}


def test_agent_states_data_holds_novel_queries_for_every_slice() -> None:
    data = agent_states_data(SMOKE)
    stored = {s.observation for s in data.states}
    asked = [q.observation for q in data.queries]
    assert len(stored) == len(data.states) == SMOKE.unique
    assert len(asked) == len(set(asked)) == N_QUERIES  # every slice of config's pool is fresh text
    assert not stored & set(asked)
    assert data.vectors.shape == (SMOKE.unique, 384) and data.query_vectors.shape == (CMP[1], 384)
    assert data.mean_tokens > 10


@pytest.mark.slow
def test_smoke_run_on_the_agent_states_corpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in OFFLINE.items():
        monkeypatch.setenv(key, value)
    out = tmp_path / "retrieval.md"
    assert retrieval.main(["--smoke", "--corpus", "agent-states", "--out", str(out)]) == 0
    lines = out.read_text().splitlines()
    assert any("--smoke --corpus agent-states --out" in line for line in lines)
    assert any(line.startswith("- Items (corpus `agent-states`)") for line in lines)
    for mode in ("miss", "hit"):
        assert any(line.startswith(f"| 300 | {mode} |") for line in lines), mode
