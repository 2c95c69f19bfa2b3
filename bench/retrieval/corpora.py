"""The corpora bench.retrieval and bench.retrieval.vs_mem0 run: the retrieval bench's
own agent states (bench.common.agent_states, the first corpus) and `agent-states`, states of one
small world written from a small vocabulary (rooms, items, colours, numbers), about
36 tokens each, with novel queries (none equal to a stored text), seeded and
deterministic. Both come with their all-MiniLM-L6-v2 vectors from the server's ONNX
encoder (cached under bench/results/retrieval/), from which the exact top 10 is
computed."""

from __future__ import annotations

import contextlib
import random
import statistics
from dataclasses import dataclass, replace

import numpy as np

from bench.common.agent_states import AgentState, fingerprint
from bench.common.output import progress
from bench.retrieval.config import CMP, N_QUERIES, RESULTS, SEQ, WARM, Config
from bench.retrieval.data import Data, _encode_cached, load_data

CORPORA = ("bench", "agent-states")
AGENT_STATES_VERSION = "vs-mem0-agent-states-v1"  # bump when the generator changes: it keys the vector cache

ROOMS = ["kitchen", "hallway", "cellar", "attic", "library", "garden", "bathroom", "bedroom", "study", "garage"]
ITEMS = ["key", "lamp", "box", "coin", "book", "knife", "apple", "rope", "map", "cup", "hammer", "torch"]
COLOURS = ["red", "blue", "green", "yellow", "black", "white", "purple", "orange"]
FURNITURE = ["table", "shelf", "bed", "chest", "desk", "counter"]
ACTIONS = ["take", "open", "drop", "examine", "go", "use"]


@dataclass
class Corpus:
    name: str
    states: list[AgentState]  # the stored items, in order (item i is states[i])
    vectors: np.ndarray  # their embeddings (ONNX, the server's encoder)
    queries: list[str]  # novel texts: none stored, none repeated
    query_vectors: np.ndarray
    warmup: list[str]  # novel too, and not among the queries
    mean_tokens_items: float
    mean_tokens_queries: float
    description: str


def _tokens(texts: list[str]) -> float:
    with contextlib.suppress(Exception):
        from tokenizers import Tokenizer

        from store.embedding import default_model_path

        tokenizer = Tokenizer.from_file(str(default_model_path() / "tokenizer.json"))
        tokenizer.no_padding()  # the file pads every text to 128 tokens; the embedder does not
        return statistics.fmean(len(e.ids) for e in tokenizer.encode_batch(texts[:2000]))
    return float("nan")


def _plural(item: str, n: int) -> str:
    return f"{n} {item}es" if n != 1 and item.endswith(("x", "ch")) else f"{n} {item}s" if n != 1 else f"1 {item}"


def agent_state_text(rng: random.Random) -> tuple[str, str]:
    """One state of the small world (about 36 tokens) and the action taken in it."""
    room, other = rng.sample(ROOMS, 2)
    a, b, c = rng.sample(ITEMS, 3)
    ca, cb, cc = (rng.choice(COLOURS) for _ in range(3))
    n = rng.randint(1, 9)
    text = (
        f"You are in the {room}. A {ca} {a} lies on the {rng.choice(FURNITURE)} and "
        f"{_plural(b, n)} {'sits' if n == 1 else 'sit'} nearby. You carry a {cc} {c} and {rng.randint(0, 99)} gold. "
        f"The door to the {other} is {rng.choice(['open', 'closed', 'locked'])}."
    )
    action = f"{rng.choice(ACTIONS)} {cb} {rng.choice([a, b, c])}"
    return text, action


def agent_states(
    items: int, queries: int, warmup: int, seed: int = 41
) -> tuple[list[AgentState], list[str], list[str]]:
    """`items` unique stored states, then `queries` + `warmup` novel query texts (same
    generator, another stream: none equal to a stored text or to each other)."""
    rng = random.Random(seed)
    seen: set[str] = set()
    states: list[AgentState] = []
    while len(states) < items:
        text, action = agent_state_text(rng)
        if text not in seen:
            seen.add(text)
            states.append(AgentState("small-world", text, action, "ok", f"I should {action}."))
    qrng = random.Random(seed + 1)
    asked: list[str] = []
    while len(asked) < queries + warmup:
        text, _ = agent_state_text(qrng)
        if text not in seen:
            seen.add(text)
            asked.append(text)
    return states, asked[:queries], asked[queries:]


def _novel(texts: list[str], stored: set[str]) -> list[int]:
    """Indexes of the texts that are neither stored nor an earlier text."""
    seen = set(stored)
    keep = []
    for i, t in enumerate(texts):
        if t not in seen:
            seen.add(t)
            keep.append(i)
    return keep


def agent_states_data(cfg: Config) -> Data:
    """`agent-states` as bench.retrieval's Data: cfg.unique stored states and the
    N_QUERIES novel query states its fixed slices take (config.SEQ, CMP, ...), the
    vectors of the states and of the first CMP[1] queries (the ones with ground truth)."""
    states, texts, _ = agent_states(cfg.unique, N_QUERIES, 0)
    observations = [s.observation for s in states]
    key = fingerprint(observations + texts)
    vectors = _encode_cached(observations, RESULTS / f"{AGENT_STATES_VERSION}-{key}-items.npy")
    qvecs = _encode_cached(texts[: CMP[1]], RESULTS / f"{AGENT_STATES_VERSION}-{key}-queries.npy")
    queries = [AgentState("small-world", t, "", "", "") for t in texts]
    return Data(
        states, vectors, queries, qvecs, statistics.fmean(len(t) for t in observations[:2000]), _tokens(observations)
    )


def load_corpus(name: str, cfg: Config, items: int, queries: int, warmup: int) -> Corpus:
    progress(f"corpus {name}: {items:,} items, {queries} queries")
    if name == "bench":
        data = load_data(replace(cfg, unique=items))
        states = data.states[:items]
        stored = {s.observation for s in states}
        pool = data.queries[SEQ[0] : CMP[1]]  # the encoded slices (700 queries)
        keep = _novel([q.observation for q in pool], stored)[:queries]
        warm = [q.observation for q in data.queries[WARM[0] : WARM[0] + warmup]]
        texts = [pool[i].observation for i in keep]
        return Corpus(
            name,
            states,
            data.vectors[:items],
            texts,
            np.ascontiguousarray(data.query_vectors[SEQ[0] + np.array(keep, dtype=int)]),
            [w for w in warm if w not in stored and w not in set(texts)],
            data.mean_tokens,
            _tokens(texts),
            "the retrieval bench's agent states (bench.common.agent_states: text-game rooms, grid worlds, "
            "web shops and web pages); queries are held-out states (a stored state with one detail "
            "changed, reworded 2 times in 3)",
        )
    if name == "agent-states":
        states, texts, warm = agent_states(items, queries, warmup)
        key = fingerprint([s.observation for s in states] + texts)
        vectors = _encode_cached([s.observation for s in states], RESULTS / f"{AGENT_STATES_VERSION}-{key}-items.npy")
        qvecs = _encode_cached(texts, RESULTS / f"{AGENT_STATES_VERSION}-{key}-queries.npy")
        return Corpus(
            name,
            states,
            vectors,
            texts,
            qvecs,
            warm,
            _tokens([s.observation for s in states]),
            _tokens(texts),
            f"states of one small world from a small vocabulary ({len(ROOMS)} rooms, {len(ITEMS)} items, "
            f"{len(COLOURS)} colours, {len(FURNITURE)} pieces of furniture, numbers); queries are fresh states "
            "of the same generator (seeded), none equal to a stored one",
        )
    raise ValueError(f"unknown corpus {name!r} (known: {', '.join(CORPORA)})")
