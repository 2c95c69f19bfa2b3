"""The ONNX embedder's idle session (`idle_threads`): an encode that finds the machine
idle runs on more intra-op threads and gives the same vectors to the bit; one that
finds it busy, or runs beside another encode, keeps the one-thread session; with one
usable core or no /proc/loadavg there is no second session. The machine's load is
set through the two functions the rule reads, so the tests hold whatever else runs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pydantic import ValidationError

from service.metrics import _ServicesCollector
from service.settings import EmbeddingSettings
from store.embedding import CachedEmbedder, build_embedder
from store.embedding import onnx as onnx_module
from store.embedding.onnx import OnnxEmbedder

TEXTS = [
    "You are in the kitchen. A red key lies on the table and 3 boxes sit nearby.",
    "You carry a blue lamp and 12 gold. The door to the attic is locked.",
    "Thought: the key opens the attic door, so I should take it first.",
    "ok",
    "",
]


@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture(scope="module")
def model_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("models")


def machine(monkeypatch: pytest.MonkeyPatch, *, cores: int, runnable: int | None) -> None:
    monkeypatch.setattr(onnx_module, "usable_cores", lambda: cores)
    monkeypatch.setattr(onnx_module, "runnable_tasks", lambda: runnable)


def onnx(model_cache: Path, idle_threads: int) -> OnnxEmbedder:
    embedder = build_embedder("onnx", cache_dir=model_cache, idle_threads=idle_threads, cache_size=0)
    assert isinstance(embedder, OnnxEmbedder)  # not the torch fallback
    return embedder


@pytest.fixture(scope="module")
def one_thread(model_cache: Path) -> Iterator[OnnxEmbedder]:
    yield onnx(model_cache, 0)


def test_an_idle_encode_takes_the_idle_session_with_the_same_vectors(
    monkeypatch: pytest.MonkeyPatch, model_cache: Path, one_thread: OnnxEmbedder
) -> None:
    machine(monkeypatch, cores=2, runnable=1)
    embedder = onnx(model_cache, 2)
    assert embedder.idle_threads == 2
    singles = np.vstack([embedder.encode([t]) for t in TEXTS])
    assert embedder.idle_encodes == len(TEXTS)  # one session run each
    batch = embedder.encode(TEXTS)
    assert embedder.idle_encodes > len(TEXTS)
    # Bit for bit what the one-thread session gives, one by one and as a batch.
    assert np.array_equal(singles, np.vstack([one_thread.encode([t]) for t in TEXTS]))
    assert np.array_equal(batch, one_thread.encode(TEXTS))


@pytest.mark.parametrize("runnable", [3, 8], ids=["one-other-task-per-core", "saturated"])
def test_a_busy_machine_keeps_one_thread(monkeypatch: pytest.MonkeyPatch, model_cache: Path, runnable: int) -> None:
    machine(monkeypatch, cores=2, runnable=runnable)
    embedder = onnx(model_cache, 2)
    embedder.encode(TEXTS[:2])
    assert embedder.idle_threads == 2 and embedder.idle_encodes == 0


def test_an_encode_beside_another_keeps_one_thread(monkeypatch: pytest.MonkeyPatch, model_cache: Path) -> None:
    machine(monkeypatch, cores=2, runnable=1)
    embedder = onnx(model_cache, 2)
    sessions: list[Any] = []
    run = onnx_module.mean_pooled

    def spy(session: Any, encodings: Any, names: Any) -> np.ndarray:
        sessions.append(session)
        if len(sessions) == 1:  # a second encode starts while the first one runs
            embedder.encode(["a state encoded meanwhile"])
        return run(session, encodings, names)

    monkeypatch.setattr(onnx_module, "mean_pooled", spy)
    embedder.encode(["the first state"])
    assert len(sessions) == 2 and sessions[0] is not sessions[1]
    assert embedder.idle_encodes == 1  # the first took the idle session, the one beside it did not
    embedder.encode(["after both"])
    assert embedder.idle_encodes == 2 and sessions[2] is sessions[0]


def test_a_long_batch_goes_back_to_one_thread_when_the_machine_gets_busy(
    monkeypatch: pytest.MonkeyPatch, model_cache: Path, one_thread: OnnxEmbedder
) -> None:
    machine(monkeypatch, cores=2, runnable=1)
    embedder = onnx(model_cache, 2)
    loads = iter([1, 5])  # idle at the first run, busy from the second on
    monkeypatch.setattr(onnx_module, "runnable_tasks", lambda: next(loads, 5))
    sessions: list[Any] = []
    run = onnx_module.mean_pooled

    def spy(session: Any, encodings: Any, names: Any) -> np.ndarray:
        sessions.append(session)
        return run(session, encodings, names)

    monkeypatch.setattr(onnx_module, "mean_pooled", spy)
    texts = [f"state {i}: " + "word " * (3 + 7 * (i % 5)) for i in range(40)]  # lengths that need several runs
    vectors = embedder.encode(texts)
    assert len(sessions) >= 3 and embedder.idle_encodes == 1
    assert all(s is sessions[1] for s in sessions[1:]) and sessions[0] is not sessions[1]
    assert np.array_equal(vectors, one_thread.encode(texts))


@pytest.mark.parametrize(
    ("cores", "runnable", "idle_threads"),
    [(1, 1, 2), (2, None, 2), (4, 1, 1), (4, 1, 0)],
    ids=["one-core", "no-loadavg", "not-more-than-threads", "off"],
)
def test_no_second_session_without_cores_load_or_more_threads(
    monkeypatch: pytest.MonkeyPatch, model_cache: Path, cores: int, runnable: int | None, idle_threads: int
) -> None:
    machine(monkeypatch, cores=cores, runnable=runnable)
    embedder = onnx(model_cache, idle_threads)
    embedder.encode(TEXTS[:1])
    assert embedder.idle_threads == 0 and embedder.idle_encodes == 0


def test_idle_threads_caps_at_the_usable_cores(monkeypatch: pytest.MonkeyPatch, model_cache: Path) -> None:
    machine(monkeypatch, cores=3, runnable=1)
    assert onnx(model_cache, 8).idle_threads == 3


def test_a_negative_count_is_refused_not_a_fallback(model_cache: Path) -> None:
    assert EmbeddingSettings().idle_threads == 2
    with pytest.raises(ValidationError, match="idle_threads"):
        EmbeddingSettings(idle_threads=-1)
    with pytest.raises(ValueError, match="idle_threads"):  # before the ONNX build, whose errors fall back to torch
        build_embedder("onnx", cache_dir=model_cache, idle_threads=-1)


def test_the_metrics_count_the_idle_runs_under_the_cache(monkeypatch: pytest.MonkeyPatch, model_cache: Path) -> None:
    machine(monkeypatch, cores=2, runnable=1)
    cached = CachedEmbedder(onnx(model_cache, 2), max_entries=10)
    cached.encode(TEXTS[:2])
    cached.encode(TEXTS[:2])  # cache hits: no run

    class NoIndexes:
        def sizes(self) -> dict[tuple[str, str, str], int]:
            return {}

        def structures(self) -> dict[tuple[str, str, str], tuple[str, bool]]:
            return {}

    samples = {s.name: s.value for family in _ServicesCollector(cached, NoIndexes()).collect() for s in family.samples}
    assert samples["reflexa_embedding_idle_encodes_total"] == 1.0  # the two texts in one run
