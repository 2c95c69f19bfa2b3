"""VectorIndex behaviour on small synthetic data, for each structure behind it:
upsert semantics, removal and exclusion, padding, the exact -> ANN switch,
persistence (and refusing damaged files), HNSW tombstones, and concurrent use."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import faiss
import numpy as np
import pytest

from store.vectors import CorruptIndexError, VectorIndex, fileformat

DIM = 24
KINDS = ["exact", "ivf", "hnsw"]


def unit(rng: np.random.Generator, n: int) -> np.ndarray:
    """Clustered unit vectors (like embeddings, unlike uniform noise)."""
    centres = rng.standard_normal((max(1, n // 50), DIM))
    v = centres[rng.integers(0, len(centres), n)] + 0.3 * rng.standard_normal((n, DIM))
    return (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)


def make(kind: str, **kwargs: object) -> VectorIndex:
    """An index already on `kind`: ANN indexes use exact_max=0 so that the first
    add builds them."""
    if kind == "exact":
        return VectorIndex(DIM, exact_max=1_000_000, **kwargs)  # type: ignore[arg-type]
    return VectorIndex(DIM, exact_max=0, ann=kind, **kwargs)  # type: ignore[arg-type]


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(7)


@pytest.mark.parametrize("kind", KINDS)
def test_upsert_replaces_and_never_duplicates(kind: str, rng: np.random.Generator) -> None:
    index = make(kind)
    ids = np.arange(100, 600, dtype=np.int64)
    index.add(ids, unit(rng, 500))
    assert index.kind == kind

    replacement = unit(rng, 50)
    index.add(ids[:50], replacement)
    assert len(index) == 500
    assert np.array_equal(index.ids(), ids)
    scores, found = index.search(replacement, 500)
    assert np.array_equal(found[:, 0], ids[:50])  # the new vector is what the id holds now
    for row in found:
        live = row[row >= 0]
        assert len(np.unique(live)) == len(live)


@pytest.mark.parametrize("kind", KINDS)
def test_repeated_id_in_one_batch_keeps_the_last_vector(kind: str, rng: np.random.Generator) -> None:
    index = make(kind)
    index.add(np.arange(200), unit(rng, 200))
    first, last = unit(rng, 2)
    index.add(np.array([7, 7]), np.stack([first, last]))
    assert len(index) == 200
    scores, found = index.search(last[None, :], 1)
    assert found[0, 0] == 7
    assert scores[0, 0] == pytest.approx(1.0, abs=1e-5)


@pytest.mark.parametrize("kind", KINDS)
def test_removed_ids_are_never_returned(kind: str, rng: np.random.Generator) -> None:
    index = make(kind)
    vectors = unit(rng, 400)
    index.add(np.arange(400), vectors)
    gone = np.arange(0, 400, 3)
    assert index.remove(gone) == len(gone)
    assert index.remove(gone) == 0  # absent ids are ignored
    assert len(index) == 400 - len(gone)
    assert not index.contains(0) and index.contains(1)
    _, found = index.search(vectors, 400)  # k >= size: everything reachable comes back
    assert not np.isin(found, gone).any()
    _, top = index.search(vectors, 10)  # removed ids do not eat result slots
    assert (top >= 0).all()
    assert np.array_equal(np.setdiff1d(np.arange(400), gone), index.ids())


@pytest.mark.parametrize("kind", KINDS)
def test_exclude_is_honoured(kind: str, rng: np.random.Generator) -> None:
    index = make(kind)
    vectors = unit(rng, 300)
    index.add(np.arange(300), vectors)
    _, top = index.search(vectors[:5], 10)
    hidden = set(top.ravel().tolist()) | {10_000}  # an id the index never held is fine
    scores, found = index.search(vectors[:5], 10, exclude=hidden)
    assert not np.isin(found, list(hidden)).any()
    assert (found >= 0).all()
    assert (np.diff(scores, axis=1) <= 1e-6).all()  # still best first


@pytest.mark.parametrize("kind", KINDS)
def test_empty_index_and_k_beyond_size_are_padded(kind: str, rng: np.random.Generator) -> None:
    index = make(kind)
    scores, found = VectorIndex(DIM).search(unit(rng, 2), 5)
    assert found.shape == (2, 5) and (found == -1).all() and np.isneginf(scores).all()

    index.add(np.array([3, 4, 5]), unit(rng, 3))
    scores, found = index.search(unit(rng, 2), 8)
    assert scores.dtype == np.float32 and found.dtype == np.int64
    assert sorted(found[0, :3].tolist()) == [3, 4, 5]
    assert (found[:, 3:] == -1).all() and np.isneginf(scores[:, 3:]).all()

    index.remove([3, 4, 5])
    scores, found = index.search(unit(rng, 1), 4)
    assert (found == -1).all() and np.isneginf(scores).all()


def test_switch_from_exact_to_ann_keeps_every_id_and_result(rng: np.random.Generator) -> None:
    for ann in ("ivf", "hnsw"):
        index = VectorIndex(DIM, exact_max=1000, ann=ann, nprobe=64, ef_search=200)
        vectors = unit(rng, 1500)
        index.add(np.arange(900), vectors[:900])
        assert index.kind == "exact"
        _, before = index.search(vectors[:900], 1)

        index.add(np.arange(900, 1500), vectors[900:])  # crosses exact_max
        assert index.kind == ann
        assert np.array_equal(index.ids(), np.arange(1500))
        _, after = index.search(vectors, 1)
        assert np.array_equal(after[:900], before)
        assert np.array_equal(after[:, 0], np.arange(1500))

        # Shrinking below exact_max / 2 goes back to exact search.
        index.remove(np.arange(1100))
        assert index.kind == "exact"
        assert np.array_equal(index.ids(), np.arange(1100, 1500))
        _, found = index.search(vectors[1100:], 1)  # the vectors came back under their ids
        assert np.array_equal(found[:, 0], np.arange(1100, 1500))


def test_bulk_add_past_exact_max_builds_ann_directly(rng: np.random.Generator) -> None:
    index = VectorIndex(DIM, exact_max=100)
    index.add(np.arange(50), unit(rng, 50))
    fresh = unit(rng, 500)
    index.add(np.arange(25, 525), fresh)  # overlaps: an upsert of 25 ids across the switch
    assert index.kind == index.config.ann
    assert len(index) == 525
    _, found = index.search(fresh[:25], 1)
    assert np.array_equal(found[:, 0], np.arange(25, 50))


def test_ann_recall_on_clustered_data(rng: np.random.Generator) -> None:
    vectors, queries = unit(rng, 3000), unit(rng, 50)
    exact = make("exact")
    exact.add(np.arange(3000), vectors)
    _, truth = exact.search(queries, 10)
    for kind in ("ivf", "hnsw"):
        ann = make(kind)
        ann.add(np.arange(3000), vectors)
        _, found = ann.search(queries, 10)
        recall = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(found.tolist(), truth.tolist(), strict=True)])
        assert recall >= 0.9, (kind, recall)


@pytest.mark.parametrize("kind", KINDS)
def test_save_load_round_trip(kind: str, rng: np.random.Generator, tmp_path: Path) -> None:
    index = make(kind, ef_search=40, nprobe=4)
    vectors = unit(rng, 800)
    index.add(np.arange(800), vectors)
    index.remove(np.arange(0, 800, 10))  # HNSW: tombstones must survive the trip
    index.add(np.arange(1, 20), unit(rng, 19))
    queries = unit(rng, 30)
    path = tmp_path / "index.rfxv"
    index.save(path)

    loaded = VectorIndex.load(path)
    assert loaded.config == index.config
    assert loaded.kind == index.kind and len(loaded) == len(index)
    assert replace(loaded.stats(), rebuilds=0) == replace(index.stats(), rebuilds=0)
    assert np.array_equal(loaded.ids(), index.ids())
    for hidden in (None, {1, 2, 3}):
        expected = index.search(queries, 15, exclude=hidden)
        got = loaded.search(queries, 15, exclude=hidden)
        assert np.array_equal(got[1], expected[1])
        assert np.array_equal(got[0], expected[0])

    loaded.add(np.array([5000]), vectors[:1])  # a loaded index is writable
    loaded.remove([11])
    assert loaded.contains(5000) and not loaded.contains(11)
    assert not list(tmp_path.glob(".*.tmp"))  # the atomic write left nothing behind


def _damage(path: Path, how: str) -> None:
    data = bytearray(path.read_bytes())
    if how == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif how == "bit flip":
        data[len(data) // 2] ^= 0x10
        path.write_bytes(bytes(data))
    elif how == "checksum cut":
        path.write_bytes(data[:-1])
    elif how == "empty":
        path.write_bytes(b"")
    else:
        path.write_bytes(b"not an index at all, but long enough to have a header" * 3)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("how", ["truncated", "bit flip", "checksum cut", "empty", "garbage"])
def test_damaged_file_raises(kind: str, how: str, rng: np.random.Generator, tmp_path: Path) -> None:
    index = make(kind)
    index.add(np.arange(300), unit(rng, 300))
    path = tmp_path / "index.rfxv"
    index.save(path)
    _damage(path, how)
    with pytest.raises(CorruptIndexError):
        VectorIndex.load(path)


def test_failed_save_keeps_the_previous_file(rng: np.random.Generator, tmp_path: Path) -> None:
    index = make("exact")
    index.add(np.arange(10), unit(rng, 10))
    path = tmp_path / "index.rfxv"
    index.save(path)
    before = path.read_bytes()
    with pytest.raises(OSError):
        index.save(tmp_path / "missing-dir" / "index.rfxv")
    assert path.read_bytes() == before


def test_hnsw_tombstones_trigger_a_rebuild(rng: np.random.Generator) -> None:
    index = make("hnsw", max_tombstone_ratio=0.2)
    vectors = unit(rng, 1000)
    index.add(np.arange(1000), vectors)
    index.remove(np.arange(150))
    assert index.stats().tombstones == 150  # 15%: kept, filtered at search time
    _, found = index.search(vectors[:150], 10)
    assert not np.isin(found, np.arange(150)).any()
    assert (found >= 0).all()

    index.remove(np.arange(150, 250))  # 25% > 20%: compacted into a fresh graph
    assert index.stats().tombstones == 0
    assert index.kind == "hnsw"
    assert np.array_equal(index.ids(), np.arange(250, 1000))
    _, found = index.search(vectors[250:], 1)
    assert np.array_equal(found[:, 0], np.arange(250, 1000))

    index.add(np.arange(250, 400), unit(rng, 150))  # upserts leave tombstones too
    assert index.stats().tombstones == 150 and len(index) == 750
    index.add(np.arange(400, 450), unit(rng, 50))  # 200 of 950 nodes: past 20%, compacted
    assert index.stats().tombstones == 0 and len(index) == 750


def test_ivf_growth_retrains_and_keeps_results(rng: np.random.Generator) -> None:
    index = make("ivf", nprobe=1000)
    vectors = unit(rng, 2000)
    index.add(np.arange(100), vectors[:100])
    for start in range(100, 2000, 100):  # passes 4x the training size several times
        index.add(np.arange(start, start + 100), vectors[start : start + 100])
    assert index.kind == "ivf" and len(index) == 2000
    _, found = index.search(vectors, 1)
    assert np.array_equal(found[:, 0], np.arange(2000))


def test_ivf_drift_retrains(rng: np.random.Generator) -> None:
    """Vectors unlike the training set pile into a few lists; the index notices the
    imbalance and retrains before queries pay for it."""

    def around(centre: np.ndarray, n: int) -> np.ndarray:
        v = centre + 0.3 * rng.standard_normal((n, DIM))
        return (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)

    home, elsewhere = rng.standard_normal((2, DIM)) * 3
    index = make("ivf")
    index.add(np.arange(1000), around(home, 1000))
    built = index.stats()
    assert built.kind == "ivf" and built.rebuilds == 1

    newcomers = around(elsewhere, 900)  # < 4x growth: only drift can trigger a retrain
    index.add(np.arange(1000, 1900), newcomers)
    after = index.stats()
    assert after.rebuilds == 2
    assert after.imbalance < 2 * built.imbalance
    _, found = index.search(newcomers, 1)
    assert np.array_equal(found[:, 0], np.arange(1000, 1900))


def test_invalid_input_is_rejected(rng: np.random.Generator) -> None:
    index = VectorIndex(DIM)
    with pytest.raises(ValueError, match="shape"):
        index.add(np.arange(3), unit(rng, 2))
    with pytest.raises(ValueError, match=">= 0"):
        index.add(np.array([-1]), unit(rng, 1))
    with pytest.raises(ValueError, match="integer"):
        index.add(np.array([1.5]), unit(rng, 1))
    bad = unit(rng, 1)
    bad[0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        index.add(np.array([1]), bad)
    with pytest.raises(ValueError, match="queries"):
        index.search(np.zeros(DIM, dtype=np.float32), 3)
    with pytest.raises(ValueError, match="k must"):
        index.search(unit(rng, 1), 0)
    with pytest.raises(ValueError, match="ann"):
        VectorIndex(DIM, ann="lsh")  # type: ignore[arg-type]


def test_faiss_threads_are_set_per_calling_thread(rng: np.random.Generator) -> None:
    """OpenMP's thread count is per OS thread: a pool thread must not search with a
    team of all cores (concurrent searches then oversubscribe the CPU)."""
    index = VectorIndex(DIM, search_threads=1, build_threads=2)
    seen: dict[str, int] = {}

    def in_a_fresh_thread() -> None:
        index.add(np.arange(10), unit(rng, 10))
        seen["after add"] = faiss.omp_get_max_threads()
        index.search(unit(rng, 1), 3)
        seen["after search"] = faiss.omp_get_max_threads()

    worker = threading.Thread(target=in_a_fresh_thread)
    worker.start()
    worker.join()
    assert seen == {"after add": 2, "after search": 1}


@pytest.mark.parametrize("kind", KINDS)
def test_concurrent_searches_with_a_writer(kind: str, rng: np.random.Generator) -> None:
    """Searches never crash and never return an id whose removal had completed when
    the search started, while a writer removes, upserts and (for ANN) rebuilds."""
    index = make(kind, max_tombstone_ratio=0.1) if kind != "exact" else VectorIndex(DIM, exact_max=1500)
    vectors = unit(rng, 3000)
    index.add(np.arange(1000), vectors[:1000])
    removed: set[int] = set()
    removed_lock = threading.Lock()
    stop = threading.Event()
    errors: list[BaseException] = []

    def guarded(fn: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                fn()
            except BaseException as exc:  # surfaced by the assertion below
                errors.append(exc)
                stop.set()

        return run

    def writer() -> None:
        for step in range(20):
            batch = np.arange(step * 40, step * 40 + 40)
            index.remove(batch)
            with removed_lock:
                removed.update(batch.tolist())
            new = np.arange(1000 + step * 100, 1100 + step * 100)
            index.add(new, vectors[new])
            index.add(new[:10], unit(rng, 10))  # upserts
        stop.set()

    def searcher() -> None:
        queries = vectors[:64]
        while not stop.is_set():
            with removed_lock:
                gone = np.fromiter(removed, dtype=np.int64)
            _, found = index.search(queries, 20)
            assert not np.isin(found, gone).any()

    threads = [threading.Thread(target=guarded(writer))] + [
        threading.Thread(target=guarded(searcher)) for _ in range(3)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    assert len(index) == 1000 - 800 + 2000


def test_background_rebuild_keeps_serving_and_replays_writes(rng: np.random.Generator) -> None:
    """With rebuild_in_background the write that crosses exact_max does not wait for
    the ANN build; writes made during the build reach the new structure."""
    release = threading.Event()

    class Gated(VectorIndex):
        def _build(self, kind: str, ids: np.ndarray, vectors: np.ndarray):  # type: ignore[no-untyped-def]
            assert release.wait(30)
            return super()._build(kind, ids, vectors)

    index = Gated(DIM, exact_max=100, nprobe=64, rebuild_in_background=True)
    vectors, replaced = unit(rng, 400), unit(rng, 10)
    index.add(np.arange(150), vectors[:150])  # crosses exact_max: returns while the build waits
    assert index.kind == "exact" and len(index) == 150
    index.add(np.arange(150, 400), vectors[150:])
    index.add(np.arange(10), replaced)  # upserts during the build
    index.remove(np.arange(10, 20))
    _, found = index.search(vectors[200:201], 1)  # served by the old structure meanwhile
    assert found[0, 0] == 200

    release.set()
    assert index.wait_for_rebuild(60)
    assert index.kind == "ivf"
    assert np.array_equal(index.ids(), np.setdiff1d(np.arange(400), np.arange(10, 20)))
    _, found = index.search(replaced, 1)
    assert np.array_equal(found[:, 0], np.arange(10))
    _, found = index.search(vectors[20:], 1)
    assert np.array_equal(found[:, 0], np.arange(20, 400))
    _, found = index.search(vectors[10:20], 5)
    assert not np.isin(found, np.arange(10, 20)).any()


def test_a_snapshot_taken_before_a_switch_switches_on_load(rng: np.random.Generator, tmp_path: Path) -> None:
    """Saved while still exact past exact_max (a background build had not landed):
    loading it starts the switch instead of serving exact search for ever."""
    index = VectorIndex(DIM, exact_max=1_000_000)
    index.add(np.arange(300), unit(rng, 300))
    index.save(tmp_path / "i.faiss")
    # The same file read with a lower threshold, as if the process had stopped mid-build.
    meta, arrays, raw = fileformat.read(tmp_path / "i.faiss")
    meta["config"]["exact_max"] = 100
    fileformat.write(tmp_path / "j.faiss", meta, arrays, raw)
    for background in (False, True):
        loaded = VectorIndex.load(tmp_path / "j.faiss", rebuild_in_background=background)
        assert loaded.wait_for_rebuild(60)
        assert loaded.kind == "ivf" and len(loaded) == 300
