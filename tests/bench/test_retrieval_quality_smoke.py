"""The retrieval quality benchmark runs end to end at its smoke size (tiny sets,
the hashing embedder) and reports every set and mode; its numbers are not judged
here (docs/benchmarks.md has the real run)."""

from __future__ import annotations

import pytest

from bench.retrieval.quality import run
from bench.retrieval.twx_sets import TWX_GAMES


def test_retrieval_quality_smoke_reports_every_set_and_mode() -> None:
    report = run(smoke=True, seeds=[7], families=("grid", "babyai"))  # twx: the test below
    rows = [line for line in report.splitlines() if line.startswith("| grid") or line.startswith("| babyai")]
    sets = {row.split("|")[1].strip() for row in rows}
    assert {"grid-numbers", "grid-words", "grid-paraphrase"} <= sets
    for name in sets:
        modes = [row.split("|")[3].strip() for row in rows if row.split("|")[1].strip() == name]
        assert modes[:2] == ["dense", "lexical"] and modes[2].startswith("hybrid calibrated (")
        assert modes[3:] == ["tfidf"]
    # the exact state is always in memory: every mode finds it in its top 10
    assert all(row.split("|")[4].strip().endswith("1.000") for row in rows)


def test_retrieval_quality_twx_smoke_reports_every_game_and_keeps_exact_matches() -> None:
    """The TextWorldExpress sets at their smoke size (a JVM; skipped without the package):
    every game yields queries, and every mode finds an exact state in its top 10."""
    pytest.importorskip("textworld_express")
    report = run(smoke=True, seeds=[7], weights=[0.2, 0.8], families=("twx",))
    rows = [line.split("|") for line in report.splitlines() if line.startswith("| twx-")]
    assert {row[1].strip() for row in rows} == {f"twx-{game}" for game in TWX_GAMES}
    for name in {row[1].strip() for row in rows}:
        modes = [row[3].strip() for row in rows if row[1].strip() == name]
        assert modes[:2] == ["dense", "lexical"] and modes[2].startswith("hybrid calibrated (")
        assert modes[3:] == ["hybrid 0.2", "hybrid 0.8", "tfidf"]
    for row in rows:
        queries = int(row[2].split("/")[1].split("(")[0])
        assert queries > 0, row
        assert row[4].strip().endswith("1.000"), row
