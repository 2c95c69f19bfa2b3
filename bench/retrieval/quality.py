"""Retrieval quality: does the server find the very state, and the right action,
for states that differ by one token or one number? Dense alone, lexical alone and
hybrid (the default) against a TF-IDF memory built in the same run.

Sets (each a memory of state -> action exemplars and labelled queries):

- `grid-numbers`: gridworld states rendered from (room, distance, direction, steps
  left); the right action depends on distance and direction. Exact queries are
  memory states; near queries change only "steps left" (a number the action does
  not depend on), so the right answer is the memory state with the same room,
  distance and direction: the one differing by one number.
- `grid-words`: the same with one word changed instead (the colour of a distractor).
- Near queries can be ambiguous: another memory state may differ from the query in
  one slot too (another distance with, by chance, the same colour and steps left).
  No ranking of text can tell which of the two the query "means", so the right
  answers of a near query are all the memory states at the least number of token
  positions from it (the generated one among them); the report counts the
  ambiguous queries.
- `babyai`: BabyAI GoToLocal scene observations (examples/babyai, MiniGrid), states
  visited by random walks in 20 worlds; the action label is the walk's action. Exact
  queries only (a state may have several labels: recall counts the exact state).
- `twx-coin`, `twx-twc`, `twx-mapreader`: TextWorldExpress states from seeded random
  walks (bench/retrieval/twx_sets.py; skipped without `textworld-express`), each
  target stored next to a distractor one word away (another room, item, exit
  direction); an exact query per target (the target must come first, not its
  distractor) and a near query per target (the target with another word changed;
  right answers labelled as for the grid sets).

Metrics: recall@1 and recall@10 of the exact state (exact queries) and of the right
action (top item's action; near queries: a nearest state's action), per mode:
`dense` (ranking.lexical_weight 0), `lexical` (lexical_weight 1: relevance is the
lexical similarity, candidates from both indexes), `hybrid calibrated (w)` (the
default: the weight w the set's own near-duplicate states chose), `hybrid w` (a fixed weight), `tfidf`
(an in-process TF-IDF cosine over the same texts; the floor to beat).

In-process (TestClient on SQLite, the real ONNX MiniLM, the server's own ranking);
no timing is measured. Run:

    python -m bench.retrieval.quality --out docs/benchmarks/retrieval-quality.md        # ~10 min (4 seeds)
    python -m bench.retrieval.quality --smoke                         # seconds
    python -m bench.retrieval.quality --sets twx --weights 0.2,0.8 --out docs/benchmarks/retrieval-quality.md
"""

from __future__ import annotations

import argparse
import math
import random
import tempfile
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from bench.common.machine import MachineFacts
from bench.common.output import add_out_option, write_section
from bench.common.processes import share_models
from bench.retrieval import twx_sets
from domain.settings import UNCALIBRATED_LEXICAL_WEIGHT, RankingSettings
from migrations import upgrade
from service.app import create_app
from service.settings import Settings
from store.lexical import tokens

FAMILIES = ("grid", "babyai", "twx")
MODES = {"dense": 0.0, "lexical": 1.0, "hybrid": None}  # None: the server's default
ADMIN = "rfx_bench_quality_admin"
ROOMS = ["kitchen", "hall", "cellar", "attic", "garden", "study"]
DIRECTIONS = ["left", "right", "ahead", "behind"]
COLOURS = ["red", "green", "blue", "purple", "yellow", "grey"]
MAX_DISTANCE = 19


@dataclass
class Query:
    text: str
    kind: str  # exact | near
    state: str  # the memory state that is the right answer
    action: str
    also: dict[str, str] = field(default_factory=dict)  # other right answers (state -> action): as near


def slot_distance(a: str, b: str) -> int | None:
    """Token positions at which two texts differ (None: not the same length)."""
    ta, tb = tokens(a), tokens(b)
    return sum(x != y for x, y in zip(ta, tb, strict=True)) if len(ta) == len(tb) else None


def nearest_others(query: Query, memory: list[tuple[str, str]]) -> dict[str, str]:
    """The memory states other than the query's own that are as near to it as its own."""
    own = slot_distance(query.text, query.state)
    return {s: a for s, a in memory if s != query.state and slot_distance(query.text, s) == own}


@dataclass
class QualitySet:
    name: str
    memory: list[tuple[str, str]]  # (state, action)
    queries: list[Query] = field(default_factory=list)


def grid_state(room: str, distance: int, direction: str, left: int, colour: str) -> str:
    return (
        f"You are in the {room}. The key is {distance} steps {direction}. "
        f"A {colour} ball lies in the corner. {left} steps left."
    )


def grid_paraphrase(room: str, distance: int, direction: str, left: int, colour: str) -> str:
    """The same facts in other words and another order: a query only the meaning matches."""
    return (
        f"Standing in the {room}; there is a key {distance} paces to the {direction}, "
        f"a {colour} ball nearby, and {left} moves remain."
    )


def grid_action(distance: int, direction: str) -> str:
    return "pick up the key" if distance == 0 else f"move {direction}"


def grid_set(name: str, n: int, vary: str, rng: random.Random) -> QualitySet:
    seen: dict[tuple[str, int, str], tuple[int, str]] = {}
    memory = []
    keys = [(room, d, direction) for room in ROOMS for d in range(MAX_DISTANCE + 1) for direction in DIRECTIONS]
    for room, d, direction in rng.sample(keys, min(n, len(keys))):  # each (room, distance, direction) once
        left, colour = rng.randint(1, 60), rng.choice(COLOURS)
        seen[(room, d, direction)] = (left, colour)
        memory.append((grid_state(room, d, direction, left, colour), grid_action(d, direction)))
    out = QualitySet(name, memory)
    for (room, d, direction), (left, colour) in list(seen.items())[: n // 2]:
        state = grid_state(room, d, direction, left, colour)
        out.queries.append(Query(state, "exact", state, grid_action(d, direction)))
        if vary == "paraphrase":  # the same state reworded: its own state is the one right answer
            out.queries.append(
                Query(grid_paraphrase(room, d, direction, left, colour), "near", state, grid_action(d, direction))
            )
            continue
        if vary == "numbers":
            other = grid_state(room, d, direction, left + rng.choice([-1, 1, 10]), colour)
        else:
            other = grid_state(room, d, direction, left, rng.choice([c for c in COLOURS if c != colour]))
        near = Query(other, "near", state, grid_action(d, direction))
        near.also = nearest_others(near, memory)
        out.queries.append(near)
    return out


def babyai_set(worlds: int, steps: int, rng: random.Random) -> QualitySet | None:
    try:
        from examples.babyai.env import BabyAIGoTo
    except ImportError:  # minigrid is an examples / dev dependency
        return None
    env = BabyAIGoTo(view="scene")
    memory: list[tuple[str, str]] = []
    texts: set[str] = set()
    try:
        for world in range(worlds):
            obs = env.reset(world, "train")
            for _ in range(steps):
                action = rng.choice(obs.actions)
                if obs.text not in texts:
                    texts.add(obs.text)
                    memory.append((obs.text, action))
                t = env.step(action)
                if t.done:
                    break
                obs = t.observation
    finally:
        env.close()
    out = QualitySet("babyai", memory)
    out.queries = [Query(s, "exact", s, a) for s, a in rng.sample(memory, min(len(memory), 150))]
    return out


def twx_set(game: str, worlds: int, steps: int, n_queries: int, seed: int) -> QualitySet:
    """TextWorldExpress states with one-word distractors (bench/retrieval/twx_sets.py):
    an exact query per target, then a near query per target, labelled as the grid sets'."""
    memory, targets = twx_sets.twx_pairs(game, worlds, steps, n_queries, seed)
    out = QualitySet(f"twx-{game}", memory)
    out.queries = [Query(state, "exact", state, action) for (state, action), _ in targets]
    for (state, action), text in targets:
        near = Query(text, "near", state, action)
        near.also = nearest_others(near, memory)
        out.queries.append(near)
    return out


class TfIdf:
    """Cosine over TF-IDF vectors of the memory's word tokens (the same tokenizer)."""

    def __init__(self, memory: list[tuple[str, str]]) -> None:
        self.memory = memory
        docs = [Counter(tokens(s)) for s, _ in memory]
        df = Counter(w for d in docs for w in d)
        self.idf = {w: math.log((1 + len(docs)) / (1 + n)) + 1 for w, n in df.items()}
        self.vectors = [self._vector(d) for d in docs]

    def _vector(self, counts: Counter[str]) -> dict[str, float]:
        v = {w: c * self.idf.get(w, 0.0) for w, c in counts.items()}
        norm = math.sqrt(sum(x * x for x in v.values())) or 1.0
        return {w: x / norm for w, x in v.items()}

    def top(self, text: str, k: int) -> list[tuple[str, str]]:
        q = self._vector(Counter(tokens(text)))
        scores = [(sum(q.get(w, 0.0) * x for w, x in v.items()), -i) for i, v in enumerate(self.vectors)]
        best = sorted(scores, reverse=True)[:k]
        return [self.memory[-i] for _, i in best]


def served(client: TestClient, ns: str, text: str) -> list[tuple[str, str]]:
    r = client.post(f"/v1/namespaces/{ns}/retrieve", json={"state": {"observation": text}, "k": 10})
    r.raise_for_status()
    return [(i["content"]["observation"], i["content"]["action"]) for i in r.json()["items"]]


@dataclass
class Recall:
    at1: int = 0
    at10: int = 0
    n: int = 0

    def add(self, ranked: list[Any], want: set[Any]) -> None:
        self.n += 1
        self.at1 += bool(ranked[:1] and ranked[0] in want)
        self.at10 += bool(want.intersection(ranked[:10]))

    def cell(self) -> str:
        return f"{self.at1 / self.n:.3f} / {self.at10 / self.n:.3f}" if self.n else "–"


def evaluate(client: TestClient, ns: str | None, qset: QualitySet, tfidf: TfIdf) -> dict[str, Recall]:
    out = {key: Recall() for key in ("exact state", "exact action", "near state", "near action")}
    for q in qset.queries:
        ranked = served(client, ns, q.text) if ns is not None else tfidf.top(q.text, 10)
        out[f"{q.kind} state"].add([s for s, _ in ranked], {q.state, *q.also})
        out[f"{q.kind} action"].add([a for _, a in ranked], {q.action, *q.also.values()})
    return out


def load(client: TestClient, ns: str, lexical_weight: float | None, qset: QualitySet) -> None:
    settings = {} if lexical_weight is None else {"ranking": {"lexical_weight": lexical_weight}}
    client.post("/v1/namespaces", json={"name": ns, "settings": settings}).raise_for_status()
    steps = [{"state": {"observation": s}, "action": a} for s, a in qset.memory]
    for start in range(0, len(steps), 500):
        body = {"task": qset.name, "steps": steps[start : start + 500], "outcome": {"success": True}}
        client.post(f"/v1/namespaces/{ns}/trajectories", json=body).raise_for_status()
    client.app.state.services.worker.run_until_idle()  # type: ignore[attr-defined]


def calibrated_label(client: TestClient, ns: str | None) -> str:
    report = client.get(f"/v1/namespaces/{ns}").raise_for_status().json()["lexical_calibration"]
    weight = report and report["weight"]
    return f"{weight:g}" if weight is not None else f"none chosen: {UNCALIBRATED_LEXICAL_WEIGHT:g}"


def sets(smoke: bool, seeds: list[int], families: tuple[str, ...] = FAMILIES) -> Iterator[QualitySet]:
    """The generated sets once per seed (a set's name carries its seed when there are
    several), then BabyAI's scenes and the TextWorldExpress sets (first seed)."""
    n = 40 if smoke else 300
    if "grid" in families:
        for seed in seeds:
            rng = random.Random(seed)
            tag = f" s{seed}" if len(seeds) > 1 else ""
            for vary in ("numbers", "words", "paraphrase"):
                yield grid_set(f"grid-{vary}{tag}", n, vary, rng)
    if "babyai" in families:
        babyai = babyai_set(3 if smoke else 20, 15 if smoke else 40, random.Random(seeds[0]))
        if babyai is not None:
            yield babyai
    if "twx" in families and twx_sets.available():
        for game in twx_sets.TWX_GAMES:
            yield twx_set(game, 5 if smoke else 15, 20 if smoke else 40, 10 if smoke else 100, seeds[0])


def run(smoke: bool, seeds: list[int], weights: list[float] | None = None, families: tuple[str, ...] = FAMILIES) -> str:
    """The report; `weights`: extra hybrid rows at these lexical weights (the
    default's row is always there); `families`: which sets (grid, babyai, twx)."""
    data = share_models(Path(tempfile.mkdtemp(prefix="reflexa-quality-")))  # the bench's one ONNX export
    url = f"sqlite:///{data / 'reflexa.db'}"
    upgrade(url)
    backend = "hashing" if smoke else "onnx"
    settings = Settings(
        database_url=url,
        data_dir=data,
        admin_key=ADMIN,
        embedding={"backend": backend},
        worker={"in_process": False},
    )
    lines = [
        "| set | memory / queries (ambiguous) | mode | exact state @1 / @10 | exact action @1 / @10 "
        "| near state @1 / @10 | near action @1 / @10 |",
        "|---|---|---|---|---|---|---|",
    ]
    lost = []  # served rows where an exact query's own state was not first
    with TestClient(create_app(settings), headers={"Authorization": f"Bearer {ADMIN}"}) as client:
        for qset in sets(smoke, seeds, families):
            tfidf = TfIdf(qset.memory)
            extra = [(f"hybrid {w:g}", w) for w in weights or []]
            for n_mode, (mode, weight) in enumerate([*MODES.items(), *extra, ("tfidf", None)]):
                ns = None
                if mode != "tfidf":
                    ns = f"{qset.name.replace('-', '_').replace(' ', '_')}_{n_mode}"
                    load(client, ns, weight, qset)
                if mode == "hybrid":  # the default: the weight the set's own states chose
                    mode = f"hybrid calibrated ({calibrated_label(client, ns)})"
                r = evaluate(client, ns, qset, tfidf)
                cells = " | ".join(r[k].cell() for k in ("exact state", "exact action", "near state", "near action"))
                ambiguous = sum(bool(q.also) for q in qset.queries)
                sizes = f"{len(qset.memory)} / {len(qset.queries)} ({ambiguous})"
                lines.append(f"| {qset.name} | {sizes} | {mode} | {cells} |")
                exact = r["exact state"]
                if mode != "tfidf" and exact.n and exact.at1 < exact.n:
                    lost.append(f"{qset.name} {mode} ({exact.n - exact.at1} of {exact.n})")
    facts = MachineFacts.collect(with_postgres=False)
    command = f"python -m bench.retrieval.quality{' --smoke' if smoke else ''} --seeds {','.join(map(str, seeds))}"
    if weights:
        command += f" --weights {','.join(f'{w:g}' for w in weights)}"
    if families != FAMILIES:
        command += f" --sets {','.join(families)}"
    check = "every served mode ranks it first" if not lost else "lost by " + "; ".join(lost)
    head = (
        f"{facts.markdown()}\n\nEmbedder: {backend}. Command: `{command}`. "
        f"hybrid calibrated (w): the default ranking.lexical_weight ({RankingSettings().lexical_weight}), the "
        "weight w the set's own near-duplicate states chose "
        f"(docs/retrieval.md; none chosen: {UNCALIBRATED_LEXICAL_WEIGHT:g}); "
        f"hybrid w: lexical_weight w. Exact match (exact state @1 of the served modes): {check}. "
        "Recall of the exact state and of the right action at 1 and 10 "
        "(near queries: the state differing by one number or word, or any other memory state as near to the "
        "query, and its action; ambiguous: the near queries with more than one such state).\n\n"
    )
    return head + "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sets and the hashing embedder (seconds)")
    parser.add_argument("--seeds", default="7,1,2,3", help="the generated sets once per seed (smoke: the first)")
    parser.add_argument("--weights", default="", help="extra hybrid rows at these lexical weights, e.g. 0.1,0.2,0.5")
    parser.add_argument("--sets", default=",".join(FAMILIES), help="which sets: grid, babyai, twx (comma list)")
    add_out_option(parser, "retrieval-quality", "print the report")
    args = parser.parse_args(argv)
    seeds = [int(x) for x in args.seeds.split(",") if x]
    families = tuple(f for f in FAMILIES if f in args.sets.split(","))
    weights = [float(w) for w in args.weights.split(",") if w]
    report = run(args.smoke, seeds[:1] if args.smoke else seeds, weights, families)
    print(report)
    # a run of some of the sets has its own section (the full run's is kept)
    section = "retrieval-quality" if families == FAMILIES else "retrieval-quality-" + "-".join(families)
    title = "Retrieval quality" if families == FAMILIES else f"Retrieval quality: {', '.join(families)} sets"
    for path in args.out:
        write_section(path, section, f"## {title}\n\n" + report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
