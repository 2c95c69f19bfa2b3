"""The local embedders with the real packaged model: ONNX gives sentence-transformers'
vectors, every backend keeps the contract (shape, dtype, unit rows, empty input),
the cache is exact and counts, threads are safe, and the ONNX export is made once,
reused, rebuilt when damaged, and served without torch."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer

from store.embedding import (
    DEFAULT_MODEL_NAME,
    CachedEmbedder,
    Embedder,
    HashingEmbedder,
    build_embedder,
    default_model_path,
    describe_model,
)
from store.embedding.onnx import OnnxEmbedder
from store.embedding.onnx_export import onnx_path

REPO = Path(__file__).resolve().parents[2]
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}

LONG_TEXT = (
    "You are in the kitchen. On the counter you see a knife, a loaf of bread, two apples and a "
    "closed microwave. The fridge to your left is closed; a note on it reads 'defrost the chicken "
    "before noon'. Through the doorway to the north you can hear the television in the living room. "
) * 8  # ~500 tokens: past the model's 256-token truncation

TEXTS = [
    "You are in the middle of a room. Looking quickly around you, you see a cabinet 4, a cabinet 3, "
    "a countertop 1, a drawer 2, a fridge 1, a garbagecan 1 and a sinkbasin 1.",
    "Your task is to: put a clean mug in the coffeemachine.",
    "You open the fridge 1. The fridge 1 is open. In it, you see a apple 2, a egg 1 and a lettuce 3.",
    "Nothing happens.",
    "You pick up the mug 1 from the countertop 1.",
    "$ pytest tests/test_api.py\nE   ModuleNotFoundError: No module named 'httpx'\n1 error in 0.31s",
    "Traceback (most recent call last):\n  File \"app.py\", line 12, in <module>\nKeyError: 'user_id'",
    "git push origin main\n! [rejected] main -> main (fetch first)\nerror: failed to push some refs",
    "WebShop: [Search] results for 'red running shoes size 9 under 50 dollars': 1. Nike Revolution 6 "
    "$44.99 2. Adidas Duramo SL $47.00 3. Brooks Ghost 15 $139.95 [Next >]",
    "Item page: Adidas Duramo SL. Size: [7][8][9][10]. Color: [black][red][white]. Price: $47.00. [Buy Now]",
    "Thought: the size 9 option is available in red, so I should select it before buying.",
    "Plan: 1) find the mug 2) rinse it in the sink 3) put it in the coffee machine.",
    'action: {"tool": "search", "arguments": {"query": "weather in Paris tomorrow"}}',
    '{"tool_result": {"status": 404, "error": "city not found"}}',
    "HTTP 429 Too Many Requests: rate limit exceeded, retry after 2 seconds",
    "maze 7x7: agent at (2,3) facing north; wall ahead; open cells east and south; key at (6,6)",
    "Inventory: sword, wooden shield, 3 health potions, 12 gold coins.",
    "The goblin attacks you for 4 damage. HP: 6/20.",
    "SELECT * FROM orders WHERE status = 'pending' returned 0 rows",
    "Login failed: invalid password for user alice (attempt 3 of 5)",
    "Page 2 of 14. Showing 10 of 138 results.",
    "Der Kühlschrank ist leer. Il n'y a plus de lait. 冰箱是空的。",
    "ok",
    "a",
    "",
    "   ",
    "🚪🔑",
    "x = np.linalg.solve(A, b)  # LinAlgError: Singular matrix",
    "Step 17: you are at the checkout page; cart total $89.97; shipping address missing.",
    "The test suite passed: 212 passed, 3 skipped in 41.2s",
    LONG_TEXT,
    LONG_TEXT.upper(),
    "error " * 400,
    " ".join(f"cell({i},{j})=wall" for i in range(12) for j in range(12)),
] + [
    f"Room {i}: you see a {obj} on the {place}; the door to the {direction} is {state}."
    for i, (obj, place, direction, state) in enumerate(
        zip(
            ["key", "lamp", "book", "coin", "map", "mug", "apple", "knife"] * 2,
            ["table", "floor", "shelf", "bed", "desk", "counter", "chair", "sofa"] * 2,
            ["north", "south", "east", "west"] * 4,
            ["open", "closed", "locked", "ajar"] * 4,
            strict=True,
        )
    )
]


@pytest.fixture(scope="module", autouse=True)
def offline() -> Iterator[None]:
    """Nothing in this module may reach a model hub."""
    with pytest.MonkeyPatch.context() as patch:
        for key, value in OFFLINE_ENV.items():
            patch.setenv(key, value)
        yield


@pytest.fixture(scope="module")
def model_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("models")


@pytest.fixture(scope="module")
def onnx_embedder(model_cache: Path) -> Embedder:
    embedder = build_embedder("onnx", cache_dir=model_cache, cache_size=0)
    assert isinstance(embedder, OnnxEmbedder)  # not the torch fallback
    return embedder


@pytest.fixture(scope="module")
def torch_embedder(model_cache: Path) -> Embedder:
    return build_embedder("torch", cache_dir=model_cache, cache_size=0)


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a.astype(np.float64) * b.astype(np.float64)).sum(axis=1)


# -- the model and its two local backends -------------------------------------------


def test_texts_cover_short_and_truncated_lengths() -> None:
    tokenizer = Tokenizer.from_file(str(default_model_path() / "tokenizer.json"))
    tokenizer.no_truncation()
    tokenizer.no_padding()
    lengths = [len(encoding.ids) for encoding in tokenizer.encode_batch(TEXTS)]
    assert len(TEXTS) >= 50
    assert min(lengths) <= 3 and max(lengths) > 256 * 1.5  # past the model's 256-token truncation


@pytest.mark.slow
def test_onnx_vectors_equal_sentence_transformers(onnx_embedder: Embedder, torch_embedder: Embedder) -> None:
    assert cosines(onnx_embedder.encode(TEXTS), torch_embedder.encode(TEXTS)).min() >= 0.9999


def test_onnx_vector_does_not_depend_on_batch_or_padding(onnx_embedder: Embedder) -> None:
    batched = onnx_embedder.encode(TEXTS)
    alone = np.concatenate([onnx_embedder.encode([text]) for text in TEXTS])
    np.testing.assert_allclose(batched, alone, atol=1e-5)


def test_both_local_backends_share_the_model_name(onnx_embedder: Embedder, torch_embedder: Embedder) -> None:
    assert onnx_embedder.name == torch_embedder.name == DEFAULT_MODEL_NAME
    assert onnx_embedder.dim == torch_embedder.dim == 384


@pytest.mark.parametrize("backend", ["onnx", "torch", "hashing", "cached"])
def test_vectors_are_unit_float32_rows_and_empty_input_is_0_by_dim(
    backend: str, onnx_embedder: Embedder, torch_embedder: Embedder
) -> None:
    embedder: Embedder = {
        "onnx": onnx_embedder,
        "torch": torch_embedder,
        "hashing": HashingEmbedder(),
        "cached": CachedEmbedder(onnx_embedder, max_entries=10),
    }[backend]
    vectors = embedder.encode(TEXTS)
    assert vectors.shape == (len(TEXTS), embedder.dim)
    assert vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    empty = embedder.encode([])
    assert empty.shape == (0, embedder.dim) and empty.dtype == np.float32
    with pytest.raises(TypeError, match="not a single str"):
        embedder.encode("a bare string")


def test_similar_states_are_closer_than_unrelated_ones(onnx_embedder: Embedder) -> None:
    door, door_again, error = onnx_embedder.encode(
        ["The door to the north is locked.", "A locked door blocks the way north.", "HTTP 500 internal server error"]
    )
    assert door @ door_again > door @ error + 0.3


def test_describe_model_reads_the_packaged_default() -> None:
    model = describe_model(None)
    assert model.path == default_model_path()
    assert (model.name, model.pooling, model.token_dim, model.max_seq_length) == (DEFAULT_MODEL_NAME, "mean", 384, 256)
    assert model.modules == ("Transformer", "Pooling", "Normalize")


def test_another_model_directory_is_named_by_directory_and_content(tmp_path: Path) -> None:
    copy = tmp_path / "my-model"
    copy.mkdir()
    for item in default_model_path().iterdir():
        (copy / item.name).symlink_to(item)
    model = describe_model(copy)
    assert model.fingerprint == describe_model(None).fingerprint
    assert model.name == f"my-model-{model.fingerprint[:8]}"


# -- the correctness gate: sentence-transformers' neighbours -------------------------

GATE_CORPUS, GATE_QUERIES = 160, 30


def top_10(corpus: np.ndarray, queries: np.ndarray) -> np.ndarray:
    scores = queries.astype(np.float64) @ corpus.astype(np.float64).T
    return np.argsort(-scores, axis=1, kind="stable")[:, :10]


@pytest.mark.slow
def test_onnx_gives_sentence_transformers_top_10_on_agent_states(
    onnx_embedder: Embedder, torch_embedder: Embedder
) -> None:
    """The gate any speed-up of the ONNX path must pass (bench/embedding/query_encoding.py runs
    it on 2,500 texts): agent states encoded in batches as the index gets them, each
    held-out query encoded alone as a retrieval sends it; against sentence-transformers
    every query's top 10 are the same items in the same order, and no vector component
    is off by 1e-5 (measured: ~2e-7)."""
    from bench.common.agent_states import corpus_states, query_states

    corpus = [state.observation for state in corpus_states(GATE_CORPUS)]
    queries = [state.observation for state in query_states(GATE_QUERIES, GATE_CORPUS, GATE_CORPUS, seed=43)]
    reference = torch_embedder.encode(corpus), torch_embedder.encode(queries)
    ours = onnx_embedder.encode(corpus), np.concatenate([onnx_embedder.encode([query]) for query in queries])
    for expected, got in zip(reference, ours, strict=True):
        assert got.dtype == np.float32 and got.shape == expected.shape
        assert np.abs(got - expected).max() < 1e-5
    np.testing.assert_array_equal(top_10(*ours), top_10(*reference))


# -- the cache ------------------------------------------------------------------------


class CountingEmbedder:
    """Records what reaches the model, to check what the cache sends on."""

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner
        self.name = inner.name
        self.dim = inner.dim
        self.calls: list[list[str]] = []

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        self.calls.append(list(texts))
        return self.inner.encode(texts)


def test_cache_returns_the_inner_vectors_and_counts_hits(onnx_embedder: Embedder) -> None:
    inner = CountingEmbedder(onnx_embedder)
    cache = CachedEmbedder(inner, max_entries=1000)
    first = cache.encode(TEXTS)
    np.testing.assert_allclose(first, onnx_embedder.encode(TEXTS), atol=1e-6)
    assert (cache.hits, cache.misses, len(cache)) == (0, len(TEXTS), len(TEXTS))
    again = cache.encode(TEXTS[::-1])
    np.testing.assert_array_equal(again, first[::-1])  # served from memory, bit for bit
    assert (cache.hits, cache.misses, len(inner.calls)) == (len(TEXTS), len(TEXTS), 1)


def test_cache_encodes_only_distinct_misses_in_one_call() -> None:
    inner = CountingEmbedder(HashingEmbedder())
    cache = CachedEmbedder(inner)
    cache.encode(["a", "b"])
    vectors = cache.encode(["b", "c", "d", "c", "a"])
    assert inner.calls == [["a", "b"], ["c", "d"]]
    np.testing.assert_array_equal(vectors, HashingEmbedder().encode(["b", "c", "d", "c", "a"]))
    assert (cache.hits, cache.misses) == (3, 4)


def test_cache_forgets_the_least_recently_used_first() -> None:
    inner = CountingEmbedder(HashingEmbedder())
    cache = CachedEmbedder(inner, max_entries=2)
    cache.encode(["a", "b"])
    cache.encode(["a"])  # "b" is now the oldest
    cache.encode(["c"])  # evicts "b"
    cache.encode(["a", "c", "b"])
    assert inner.calls[-1] == ["b"] and len(cache) == 2


def test_cached_vectors_cannot_be_changed_through_a_result() -> None:
    cache = CachedEmbedder(HashingEmbedder())
    cache.encode(["door"])[0] *= 0
    assert np.linalg.norm(cache.encode(["door"])[0]) == pytest.approx(1.0)


@pytest.mark.parametrize("cached", [False, True], ids=["onnx", "cached-onnx"])
def test_four_threads_encoding_at_once_get_correct_vectors(onnx_embedder: Embedder, cached: bool) -> None:
    embedder: Embedder = CachedEmbedder(onnx_embedder, max_entries=20) if cached else onnx_embedder
    expected = onnx_embedder.encode(TEXTS)
    failures: list[str] = []
    barrier = threading.Barrier(4)

    def work(worker: int) -> None:
        barrier.wait()
        for round_ in range(6):
            rows = [(worker * 7 + round_ * 5 + k) % len(TEXTS) for k in range(1 + (worker + round_) % 9)]
            got = embedder.encode([TEXTS[row] for row in rows])
            if not np.allclose(got, expected[rows], atol=1e-5):
                failures.append(f"worker {worker} round {round_}")

    threads = [threading.Thread(target=work, args=(worker,)) for worker in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []


# -- the hashing embedder -------------------------------------------------------------


def test_hashing_embedder_is_deterministic_and_word_overlap_is_similarity() -> None:
    embedder = HashingEmbedder(dim=256)
    door, door_again, unrelated, same = embedder.encode(
        ["the door is locked", "The locked door!", "stack overflow in parser", "the door is locked"]
    )
    assert embedder.name == "hashing-256"
    np.testing.assert_array_equal(door, same)
    np.testing.assert_array_equal(door, HashingEmbedder(dim=256).encode(["the door is locked"])[0])
    assert door @ door_again > 0.4 > abs(door @ unrelated)
    assert np.linalg.norm(embedder.encode(["", "?!"]), axis=1) == pytest.approx([1.0, 1.0])


# -- building, the export cache, and serving without torch ----------------------------


def test_build_embedder_wraps_in_the_cache_unless_cache_size_is_0(model_cache: Path) -> None:
    cached = build_embedder("hashing", cache_dir=model_cache, cache_size=5)
    assert isinstance(cached, CachedEmbedder) and cached.max_entries == 5
    assert isinstance(build_embedder("hashing", cache_dir=model_cache, cache_size=0), HashingEmbedder)
    with pytest.raises(ValueError, match="unknown embedding backend 'bert'"):
        build_embedder("bert", cache_dir=model_cache)
    with pytest.raises(ValueError, match="openai_base_url, openai_dim"):
        build_embedder("openai", cache_dir=model_cache, openai_model="m")


def test_onnx_export_is_reused_by_the_next_build(model_cache: Path, onnx_embedder: Embedder) -> None:
    export = onnx_path(describe_model(None), model_cache)
    before = export.stat().st_mtime_ns
    rebuilt = build_embedder("onnx", cache_dir=model_cache, cache_size=0)
    assert isinstance(rebuilt, OnnxEmbedder)
    assert export.stat().st_mtime_ns == before
    assert [file.name for file in model_cache.glob("*.onnx")] == [export.name]


@pytest.mark.slow
def test_a_damaged_export_is_exported_again_not_used(
    model_cache: Path, onnx_embedder: Embedder, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    good = onnx_path(describe_model(None), model_cache)
    damaged = onnx_path(describe_model(None), tmp_path)
    damaged.write_bytes(good.read_bytes()[: good.stat().st_size // 2])  # a partial copy
    leftover = damaged.with_name(damaged.name + ".1234-abcd.tmp")
    leftover.write_bytes(b"garbage from a killed exporter")
    with caplog.at_level(logging.WARNING, logger="store.embedding"):
        embedder = build_embedder("onnx", cache_dir=tmp_path, cache_size=0)
    assert isinstance(embedder, OnnxEmbedder)
    assert "is unusable" in caplog.text
    assert damaged.stat().st_size == good.stat().st_size
    np.testing.assert_allclose(embedder.encode(TEXTS[:8]), onnx_embedder.encode(TEXTS[:8]), atol=1e-5)


def test_falls_back_to_torch_when_onnx_cannot_be_used(
    model_cache: Path, torch_embedder: Embedder, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def no_onnxruntime(*args: object, **kwargs: object) -> None:
        raise ImportError("No module named 'onnxruntime'")

    monkeypatch.setattr("store.embedding.onnx.OnnxEmbedder", no_onnxruntime)
    with caplog.at_level(logging.WARNING, logger="store.embedding"):
        embedder = build_embedder("onnx", cache_dir=model_cache, cache_size=0)
    assert type(embedder).__name__ == "SentenceEmbedder"
    assert "falling back to torch" in caplog.text
    np.testing.assert_allclose(embedder.encode(TEXTS[:4]), torch_embedder.encode(TEXTS[:4]), atol=1e-6)


def test_encoding_with_an_existing_export_never_imports_torch(model_cache: Path, onnx_embedder: Embedder) -> None:
    script = (
        "import sys\n"
        "from pathlib import Path\n"
        "from store.embedding import build_embedder\n"
        f"embedder = build_embedder('onnx', cache_dir=Path({str(model_cache)!r}))\n"
        "vectors = embedder.encode(['the door is locked', 'you see a key'])\n"
        "print(type(embedder.inner).__name__, vectors.shape, 'torch' in sys.modules)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=REPO,
        env={**os.environ, **OFFLINE_ENV},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["OnnxEmbedder", "(2,", "384)", "False"]
