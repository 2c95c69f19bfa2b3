"""`python -m bench.retrieval --corpus agent-states` runs the retrieval bench on the
small-vocabulary corpus (bench.retrieval.corpora), end to end at its smoke size:
the items and queries are that corpus's, the rows the bench always writes are there,
and the reproducing command names the corpus. Structure only, no timing is judged."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.retrieval.config import CMP, N_QUERIES, SMOKE
from bench.retrieval.corpora import agent_states_data

REPO = Path(__file__).resolve().parents[2]
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
def test_smoke_run_on_the_agent_states_corpus(tmp_path: Path) -> None:
    out = tmp_path / "retrieval.md"
    proc = subprocess.run(
        [sys.executable, "-m", "bench.retrieval", "--smoke", "--corpus", "agent-states", "--out", str(out)],
        cwd=REPO,
        env={**os.environ, **OFFLINE},
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-6000:]
    lines = out.read_text().splitlines()
    assert any("--smoke --corpus agent-states --out" in line for line in lines)
    assert any(line.startswith("- Items (corpus `agent-states`)") for line in lines)
    for mode in ("miss", "hit"):
        assert any(line.startswith(f"| 300 | {mode} |") for line in lines), mode
