"""Finding candidates for a retrieve: the query's texts and vectors (every
request's texts in one encoder call), the dense search of each (kind, field)
index (all requests asking for the same kinds at once), and the lexical index's
matches. Ranking them is service/retrieval/ranking.py's job."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from domain.hashing import text_hash
from domain.reflections import TASK_KEYED
from domain.settings import NamespaceSettings
from domain.state_text import internal_text, state_text, task_query_text
from service.retrieval import repository as repo
from service.retrieval.lexical_matches import LexicalMatches
from service.retrieval.lexical_terms import TermCounts
from service.retrieval.schemas import RetrieveRequest
from store import lexical as lexical_repo
from store.database import Database
from store.embedding.base import Embedder
from store.index_registry import IndexRegistry
from store.vectors.pinned import PinnedMemory

MIN_FETCH = 50
Hits = tuple[set[int], bool]  # the pks found, and whether every index gave all it has


@dataclass
class Query:
    state: np.ndarray
    internal: np.ndarray | None
    task: np.ndarray | None
    hashes: dict[str, str]  # "state" / "internal" / "task" -> hash of the text embedded
    texts: dict[str, str]  # "state" / "internal" / "task" -> the text embedded

    def for_kind(self, kind: str) -> np.ndarray | None:
        """The vector an item of this kind is matched against (None: not matchable)."""
        return self.task if kind in TASK_KEYED else self.state

    def is_exact(self, row: repo.CandidateRow) -> bool:
        """The item's state text is the query's (the task's, for task-keyed kinds) and,
        when the query has an internal state, so is its internal state: its vector's,
        or that of any occurrence merged into it (a state revisited under another
        subgoal)."""
        main = self.hashes.get("task" if row.kind in TASK_KEYED else "state")
        if main is None or row.text_hashes.get("state") != main:
            return False
        internal = self.hashes.get("internal")
        return internal is None or row.text_hashes.get("internal") == internal or internal in row.internal_hashes


class CandidateSearch:
    def __init__(self, db: Database, embedder: Embedder, registry: IndexRegistry) -> None:
        self.db = db
        self.embedder = embedder
        self.registry = registry
        self.terms = TermCounts()  # which query words the lexical index is searched by
        self.lexical = LexicalMatches()  # recent matches, reused while the index stands still

    @staticmethod
    def texts(reqs: list[RetrieveRequest], settings: NamespaceSettings) -> list[dict[str, str]]:
        """Each request's texts: "state", and "internal" / "task" when it has them."""
        per_request: list[dict[str, str]] = []
        for req in reqs:
            texts = {
                "state": state_text(
                    settings.state_text, observation=req.state.observation, data=req.state.data, task=req.task
                )
            }
            i_text = internal_text(req.internal_state, settings.state_text.max_chars)
            if i_text is not None:
                texts["internal"] = i_text
            if req.task and TASK_KEYED.intersection(req.kinds):
                texts["task"] = task_query_text(req.task)
            per_request.append(texts)
        return per_request

    def embed(self, per_request: list[dict[str, str]]) -> list[Query]:
        """Every request's texts (`texts`) in one encoder call."""
        flat = [text for texts in per_request for text in texts.values()]
        matrix = iter(self.embedder.encode(flat))
        queries = []
        for texts in per_request:
            vectors = {name: next(matrix) for name in texts}
            queries.append(
                Query(
                    state=vectors["state"],
                    internal=vectors.get("internal"),
                    task=vectors.get("task"),
                    hashes={name: text_hash(text) for name, text in texts.items()},
                    texts=texts,
                )
            )
        return queries

    def lexical_hits_live(self, ns: str, reqs: list[RetrieveRequest], texts: list[dict[str, str]]) -> list[set[int]]:
        """Each request's matches in the live lexical index: it needs the texts, not the
        vectors, so a retrieve runs it while the encoder (which lets go of the GIL)
        works on the same texts. Matches searched at the index's current generation are
        reused (`LexicalMatches`)."""
        with self.db.read() as session:
            generation: list[int] = []  # read once, before the first search

            def matches(kinds: list[str], text: str, n: int) -> list[tuple[int, float]]:
                words = self.terms.searchable(session, lexical_repo.query_words(text))
                if not words:
                    return []
                if not generation:
                    generation.append(lexical_repo.read_generation(session, ns))
                return self.lexical.matches(session, generation[0], ns, kinds, words, n)

            return [self._lexical_hits(req, t, matches) for req, t in zip(reqs, texts, strict=True)]

    @staticmethod
    def wanted(req: RetrieveRequest) -> int:
        """Candidates a request needs to survive the filters (3k to diversify with MMR)."""
        return req.k * (3 if req.mmr_lambda is not None else 1)

    @classmethod
    def fetch_size(cls, req: RetrieveRequest) -> int:
        """How deep the first search goes: four times what is wanted, at least 50."""
        return max(MIN_FETCH, cls.wanted(req) * 4)

    def search(
        self, ns: str, kinds: list[str], vectors: list[Query], fetch: list[int], pinned: PinnedMemory | None = None
    ) -> list[Hits]:
        """Search each (kind, field) index once for all the queries: per query, the
        pks found and whether every index gave all it has. `pinned`: a snapshot's
        indexes instead of the live ones."""
        out: list[Hits] = [(set(), True) for _ in vectors]
        indexes: IndexRegistry | PinnedMemory = self.registry if pinned is None else pinned
        for kind in kinds:
            for field in ("state", "internal"):
                index = indexes.index(ns, kind, field)
                if index is None or len(index) == 0:
                    continue
                rows = [
                    (i, v)
                    for i, q in enumerate(vectors)
                    if (v := (q.for_kind(kind) if field == "state" else q.internal)) is not None
                ]
                if not rows:
                    continue
                depth = min(max(fetch[i] for i, _ in rows), len(index))
                _, ids = index.search(np.vstack([v for _, v in rows]), depth)
                for (i, _), found_row in zip(rows, ids, strict=True):
                    head = found_row[: min(fetch[i], len(index))]
                    found = head[head >= 0].tolist()
                    pks, exhausted = out[i]
                    pks.update(found)
                    out[i] = (pks, exhausted and len(found) >= len(index))
        return out

    def first_hits(
        self,
        ns: str,
        reqs: list[RetrieveRequest],
        queries: list[Query],
        *,
        lexical: bool,
        live_lexical: list[set[int]] | None = None,
        pinned: PinnedMemory | None = None,
        dense: list[Hits] | None = None,
    ) -> list[Hits]:
        """The first search of every request, batched by kind (requests asking for the
        same kinds are searched together), and with `lexical` its lexical matches: the
        pinned lexicon's under a snapshot, else `live_lexical` (`lexical_hits_live`).
        `dense`: this call's dense search without `lexical`, made already (it is not
        made again)."""
        if dense is not None:
            out: list[Hits] = [(set(pks), exhausted) for pks, exhausted in dense]
        else:
            out = [(set(), True) for _ in reqs]
            groups: dict[tuple[str, ...], list[int]] = {}
            for i, req in enumerate(reqs):
                groups.setdefault(tuple(req.kinds), []).append(i)
            for kinds, members in groups.items():
                found = self.search(
                    ns, list(kinds), [queries[i] for i in members], [self.fetch_size(reqs[i]) for i in members], pinned
                )
                for i, hit in zip(members, found, strict=True):
                    out[i] = hit
        if lexical and pinned is not None:
            for i, (req, query) in enumerate(zip(reqs, queries, strict=True)):
                out[i][0].update(self._lexical_hits(req, query.texts, pinned.lexicon.matches))
        elif lexical:
            assert live_lexical is not None
            for i, found_pks in enumerate(live_lexical):
                out[i][0].update(found_pks)
        return out

    def _lexical_hits(
        self,
        req: RetrieveRequest,
        texts: dict[str, str],
        matches: Callable[[list[str], str, int], list[tuple[int, float]]],
    ) -> set[int]:
        """The lexical index's best matches of the query's state text (and task text,
        for the task-keyed kinds): candidates a dense search may rank too low."""
        fetch = self.fetch_size(req)
        found: set[int] = set()
        for keyed in (False, True):
            kinds = [k for k in req.kinds if (k in TASK_KEYED) is keyed]
            text = texts.get("task" if keyed else "state")
            if kinds and text:
                found.update(pk for pk, _ in matches(kinds, text, fetch))
        return found
