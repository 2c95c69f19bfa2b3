"""The retrieval quality benchmark runs end to end at its smoke size (tiny sets,
the hashing embedder) and reports every set and mode; its numbers are not judged
here (docs/benchmarks.md has the real run)."""

from __future__ import annotations

from bench.retrieval.quality import MODES, run


def test_retrieval_quality_smoke_reports_every_set_and_mode() -> None:
    report = run(smoke=True, seeds=[7])
    rows = [line for line in report.splitlines() if line.startswith("| grid") or line.startswith("| babyai")]
    sets = {row.split("|")[1].strip() for row in rows}
    assert {"grid-numbers", "grid-words", "grid-paraphrase"} <= sets
    for name in sets:
        modes = [row.split("|")[3].strip() for row in rows if row.split("|")[1].strip() == name]
        assert modes == [*MODES, "tfidf"]
    # the exact state is always in memory: every mode finds it in its top 10
    assert all(row.split("|")[4].strip().endswith("1.000") for row in rows)
