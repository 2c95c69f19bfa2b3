"""Retrieval: embed the query state, search the namespace's indexes, filter in SQL,
rank, log, render. And outcome credit: what was served earns or loses utility.

No transaction is open while the query is embedded or the index searched; the
retrieval log is one short write at the end, made after the answer is sent on the
routes (service/retrieval/log.py).
"""

from __future__ import annotations

import dataclasses
import math
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime

import numpy as np
from sqlalchemy.orm import Session

from domain.consistency import parse_token
from domain.errors import InvalidInput
from domain.hashing import task_hash
from domain.reflections import TASK_KEYED
from domain.settings import NamespaceSettings, RankingSettings, ranking_settings
from service.auth import Permission, Principal
from service.limits.checks import LimitChecker
from service.namespaces.service import NamespaceService
from service.retrieval import holdout, ranking
from service.retrieval import repository as repo
from service.retrieval.batch_rows import BatchRows, Gathered
from service.retrieval.candidates import CandidateSearch, Hits, Query
from service.retrieval.consistency import wait_for
from service.retrieval.credit import credit_retrieval
from service.retrieval.log import LogRecord, RetrievalLog
from service.retrieval.render import render
from service.retrieval.schemas import (
    EvidenceRead,
    RetrievalOutcomeCreate,
    RetrievalOutcomeRead,
    RetrieveBatchRequest,
    RetrieveBatchResponse,
    RetrievedItem,
    RetrieveRequest,
    RetrieveResponse,
    UtilityRead,
)
from service.snapshots.service import SnapshotService
from store import evidence as evidence_repo
from store import retrievals as retrievals_repo
from store import snapshots as snapshots_repo
from store.database import Database
from store.embedding.base import Embedder
from store.index_registry import IndexRegistry
from store.models import utcnow
from store.snapshots import SnapshotRef
from store.vectors.pinned import PinnedCache, PinnedMemory

EVIDENCE_PER_ITEM = 5
# One per process (threads are made as needed): the live lexical searches that run
# while a request's texts are encoded.
_LEXICAL_SEARCHES = ThreadPoolExecutor(max_workers=8, thread_name_prefix="lexical-search")


@dataclass(frozen=True)
class _View:
    """What a retrieve ranks against: live, or pinned by a snapshot."""

    settings: NamespaceSettings
    outcome_successes: int
    outcome_total: int
    now: datetime
    snapshot: SnapshotRef | None
    pinned: PinnedMemory | None
    # updated_at -> (recency factor at `now`, timestamp): a batch ranks the same items
    # for many requests
    _times: dict[datetime, tuple[float, float]] = dataclasses.field(default_factory=dict, compare=False)

    def row_times(self, updated_at: datetime) -> tuple[float, float]:
        """An item's `ranking.recency_factor` and its `updated_at.timestamp()` (the rank key's tie-break)."""
        found = self._times.get(updated_at)
        if found is None:
            rec = ranking.recency_factor(updated_at, self.now, self.settings.ranking)
            found = self._times[updated_at] = (rec, updated_at.timestamp())
        return found


@dataclass
class _Prefetched:
    rows: dict[repo.CandidateFilters, dict[int, repo.CandidateRow]]  # by row filters, then pk
    citations: dict[int, list[repo.Citation]]
    _table: BatchRows | None = None

    def table(self, view: _View) -> BatchRows:
        """Every prefetched row as one table of arrays (`BatchRows`), made once a batch."""
        if self._table is None:
            self._table = BatchRows.build(self.rows, lambda r: view.row_times(r.updated_at))
        return self._table


@dataclass(frozen=True)
class _ReadRows:
    """Candidate rows of a single request read before its candidates are ranked: its
    live lexical matches' (read by the lexical search's thread while the query is
    encoded), and on a cache hit its dense hits' too (read while that search runs).
    `asked`: the pks read (a row that failed the filters is absent from `rows`, and
    is not asked again)."""

    asked: frozenset[int]
    rows: dict[int, repo.CandidateRow]

    def __or__(self, other: _ReadRows | None) -> _ReadRows:
        if other is None:
            return self
        return _ReadRows(self.asked | other.asked, self.rows | other.rows)


@dataclass
class _Candidate:
    row: repo.CandidateRow
    state_sim: float
    internal_sim: float | None
    similarity: float
    lexical: float | None
    exact: bool
    score: float
    utility: ranking.Utility
    vector: np.ndarray


@dataclass
class _Scored:
    """A request's candidates scored as arrays (`ranking.scores`); a `_Candidate` is
    built only for a row that may be served (`candidate`). NaN: no internal or
    lexical similarity."""

    rows: list[repo.CandidateRow]
    state_sims: np.ndarray
    internal_sims: np.ndarray
    lexical: np.ndarray
    scores: ranking.Scores
    baseline: float

    @property
    def score(self) -> np.ndarray:
        return self.scores.score

    @property
    def order(self) -> np.ndarray:
        return self.scores.order

    def keeping(self, mask: np.ndarray) -> _Scored:
        """The same rows, rank order restricted to those `mask` keeps."""
        order = self.order[mask[self.order]]
        return dataclasses.replace(self, scores=dataclasses.replace(self.scores, order=order))

    def candidate(self, i: int) -> _Candidate:
        row = self.rows[i]
        return _Candidate(
            row,
            float(self.state_sims[i]),
            _or_none(float(self.internal_sims[i])),
            float(self.scores.similarity[i]),
            _or_none(float(self.lexical[i])),
            bool(self.scores.exact[i]),
            float(self.scores.score[i]),
            ranking.utility(row.successes, row.failures, row.uses, self.baseline),
            row.vectors["state"],
        )


class RetrievalService:
    def __init__(
        self,
        db: Database,
        namespaces: NamespaceService,
        embedder: Embedder,
        registry: IndexRegistry,
        checker: LimitChecker,
        snapshots: SnapshotService,
        log: RetrievalLog,
    ) -> None:
        self.db = db
        self.log = log
        self.snapshots = snapshots
        self.pinned = PinnedCache()
        self.namespaces = namespaces
        self.embedder = embedder
        self.registry = registry
        self.checker = checker
        self.search = CandidateSearch(db, embedder, registry)

    # -- retrieve ----------------------------------------------------------

    def retrieve(self, principal: Principal, ns: str, req: RetrieveRequest) -> RetrieveResponse:
        return self.retrieve_many(principal, ns, [req], field="")[0]

    def retrieve_deferred(
        self, principal: Principal, ns: str, req: RetrieveRequest
    ) -> tuple[RetrieveResponse, Callable[[], None]]:
        """`retrieve` for the route: the log record is journaled, and its database write
        is returned, to run once the answer is sent (service/retrieval/log.py)."""
        responses, records = self._retrieve(principal, ns, [req], field="")
        return responses[0], self.log.defer(records)

    def retrieve_batch(
        self, principal: Principal, ns: str, body: RetrieveBatchRequest
    ) -> tuple[RetrieveBatchResponse, Callable[[], None]]:
        """Many states at once (a trainer's rollout group, a batch of agents): one
        encoder call for every text, one index search per (kind, field) for every
        state, one write for every retrieval log; each state keeps its own filters,
        k and rendering, and gets its own retrieval id. The log is written as
        `retrieve_deferred`'s is."""
        self.checker.batch_size(len(body.requests), "requests", self.checker.limits.max_batch_retrievals)
        responses, records = self._retrieve(principal, ns, body.requests, field="requests")
        return RetrieveBatchResponse(results=responses), self.log.defer(records)

    def retrieve_many(
        self,
        principal: Principal,
        ns: str,
        reqs: list[RetrieveRequest],
        *,
        field: str,
        log: bool = True,
        holdout: bool = True,
        partial_kinds: frozenset[str] = frozenset(),
    ) -> list[RetrieveResponse]:
        """Retrieve for every request at once (the batch route, and teacher contexts,
        which pass log=False: a trainer's read is not an agent's decision and earns
        no credit). `field` prefixes error fields ("requests" -> "requests[3].k").

        `partial_kinds` (teacher contexts pass {"exemplar"}): items of these kinds
        are not hidden by `exclude_trajectory_ids` / `exclude_tasks` when only some
        of their evidence is excluded; they come back, counts whole, when any
        citation survives, and the caller subtracts the excluded evidence (a merged
        exemplar's statistics are per evidence row). Other kinds are hidden as usual."""
        responses, records = self._retrieve(
            principal, ns, reqs, field=field, log=log, holdout=holdout, partial_kinds=partial_kinds
        )
        self.log.write_now(records)
        return responses

    def _retrieve(
        self,
        principal: Principal,
        ns: str,
        reqs: list[RetrieveRequest],
        *,
        field: str,
        log: bool = True,
        holdout: bool = True,
        partial_kinds: frozenset[str] = frozenset(),
    ) -> tuple[list[RetrieveResponse], list[LogRecord]]:
        """`retrieve_many`'s answers, and the log records its caller writes."""
        principal.require(Permission.RETRIEVE, ns)
        started = time.perf_counter()

        def where(i: int, name: str) -> str:
            return f"{field}[{i}].{name}" if field else name

        for i, req in enumerate(reqs):
            self.checker.json(req.state.data, where(i, "state.data"))
        view = self._view(ns, reqs, where)
        tokens = [
            parse_token(r.consistency_token, where(i, "consistency_token")) if r.consistency_token else None
            for i, r in enumerate(reqs)
        ]
        baseline = ranking.baseline_rate(view.outcome_successes, view.outcome_total)

        waited = [0] * len(reqs)
        if view.snapshot is None:
            for i, (req, token) in enumerate(zip(reqs, tokens, strict=True)):
                if token is not None:  # after the first wait the others are usually done
                    waited[i] = wait_for(self.db, ns, token, req.wait_timeout_ms, where(i, "consistency_token"))
            self.registry.sync(ns, force=any(t is not None for t in tokens))

        # A read under a snapshot is not logged: nothing it serves can be credited.
        logged = log and view.snapshot is None
        ids: list[str | None] = ["r_" + uuid.uuid4().hex if logged else None for _ in reqs]
        # Only what an outcome can follow enters the holdout draw (never a snapshot's read),
        # and only items served as items (`holdout=False`: the pre-action check's statistics).
        holdout_rate = view.settings.credit.holdout_rate if logged and holdout else 0.0

        texts = self.search.texts(reqs, view.settings)
        lexical = view.settings.ranking.lexical_weight > 0
        # The live lexical index is searched by the texts, and a single request's
        # matches read, while the encoder (which lets go of the GIL) embeds them: a
        # retrieve waits for the longer of the two.
        encoded = threading.Event()
        pending = (
            _LEXICAL_SEARCHES.submit(self._lexical_live, ns, reqs, texts, partial_kinds, encoded)
            if lexical and view.pinned is None
            else None
        )
        queries = self.search.embed(texts)
        encoded.set()
        dense: list[Hits] | None = None
        dense_rows: _ReadRows | None = None
        if pending is not None and len(reqs) == 1 and not pending.done():
            # The encode was shorter than the lexical search (a cached query): search
            # the vectors and read their rows while that search finishes.
            dense = self.search.first_hits(ns, reqs, queries, lexical=False)
            dense_rows = self._read_rows(ns, reqs[0], dense[0][0], partial_kinds)
        live_lexical, lexical_rows = pending.result() if pending is not None else (None, None)
        read_rows = lexical_rows | dense_rows if lexical_rows is not None else dense_rows
        # The candidate and evidence reads share one connection (the query is encoded:
        # nothing slow happens inside); plain SELECTs, so no transaction on PostgreSQL.
        with self.db.one_read(autocommit=True):
            first_hits = self.search.first_hits(
                ns, reqs, queries, lexical=lexical, live_lexical=live_lexical, pinned=view.pinned, dense=dense
            )
            prefetched = self._prefetch(ns, reqs, first_hits, view, partial_kinds) if len(reqs) > 1 else None
            served = [
                self._serve(
                    ns,
                    self._candidates(
                        ns, req, view, query, baseline, hits, prefetched, read_rows, partial_kinds=partial_kinds
                    ),
                    req,
                    holdout_rate,
                    unit=req.trajectory_id or rid or "",
                )
                for req, query, hits, rid in zip(reqs, queries, first_hits, ids, strict=True)
            ]
            chosen = [picked for picked, _ in served]

            snapshot_pk = view.snapshot.pk if view.snapshot is not None else None
            with self.db.read() as session:
                pks = sorted({c.row.pk for picked in chosen for c in picked})
                evidence = evidence_repo.list_evidence_summaries(session, pks, EVIDENCE_PER_ITEM, snapshot_pk)
        items = [[self._item(c, evidence.get(c.row.pk, [])) for c in picked] for picked in chosen]
        contexts = [render(its, req.render) if req.render else None for req, its in zip(reqs, items, strict=True)]

        # The server's time to answer, the consistency wait left out (the UI's latency).
        elapsed_ms = (time.perf_counter() - started) * 1000.0 - sum(waited)

        records = [  # an unlogged read has no retrieval ids
            LogRecord(
                id=rid,
                namespace=ns,
                query=_logged_query(req),
                trajectory_id=req.trajectory_id,
                created_at=utcnow(),
                latency_ms=round(elapsed_ms, 3),
                items=[(c.row.pk, rank, c.score, c.similarity) for rank, c in enumerate(picked)],
                holdouts=drawn,
                # the block itself: the items' content may change after serving (edits, merges)
                context=context,
            )
            for rid, req, (picked, drawn), context in zip(ids, reqs, served, contexts, strict=True)
            if rid is not None
        ]
        return [
            RetrieveResponse(
                retrieval_id=rid,
                items=its,
                context=context,
                gamma=view.settings.gamma,
                waited_ms=w,
            )
            for rid, its, context, w in zip(ids, items, contexts, waited, strict=True)
        ], records

    def _lexical_live(
        self,
        ns: str,
        reqs: list[RetrieveRequest],
        texts: list[dict[str, str]],
        partial_kinds: frozenset[str],
        encoded: threading.Event,
    ) -> tuple[list[set[int]], _ReadRows | None]:
        """The live lexical matches of every request and, for a single request, their
        candidate rows too: both need the texts, not the vectors, so they run while
        the encoder (which lets go of the GIL) embeds the texts. A batch reads its
        rows together afterwards (`_prefetch`). On SQLite, so does a request whose
        encode is over (`encoded`: a cached query): building rows from SQLite is
        Python under the GIL, so beside the dense rows the request reads meanwhile
        it only slows both (a cache hit 6.6-9.8 ms read after, 8.5-11.4 beside). On
        PostgreSQL the two reads mostly wait on the server, so they overlap (reading
        them after made a hit 12.1 -> 14.2 ms: docs/benchmarks.md)."""
        with self.db.one_read(autocommit=True):  # the matches and their rows: one checkout
            hits = self.search.lexical_hits_live(ns, reqs, texts)
            if len(reqs) != 1 or not hits[0] or (encoded.is_set() and not self.db.is_postgres):
                return hits, None
            return hits, self._read_rows(ns, reqs[0], hits[0], partial_kinds)

    def _read_rows(self, ns: str, req: RetrieveRequest, pks: set[int], partial_kinds: frozenset[str]) -> _ReadRows:
        """The live candidate rows among `pks` that pass the request's row filters."""
        asked = sorted(pks)
        with self.db.read(autocommit=True) as session:
            rows = repo.list_candidates(
                session, ns, asked, _sql_filters(self._filters(req), req, partial_kinds), self.embedder.name
            )
        return _ReadRows(frozenset(asked), {r.pk: r for r in rows})

    def _view(self, ns: str, reqs: list[RetrieveRequest], where: Callable[[int, str], str]) -> _View:
        """What the requests read: the live namespace, or one snapshot (its settings,
        baseline, clock and indexes) when they name it. One batch reads one of them."""
        named = reqs[0].snapshot
        for i, req in enumerate(reqs):
            if req.snapshot != named:
                raise InvalidInput(
                    f"{where(i, 'snapshot')}: every request of one batch reads the same snapshot (or none)",
                    field=where(i, "snapshot"),
                    rule="one_snapshot_per_batch",
                )
            if named is not None and req.consistency_token is not None:
                raise InvalidInput(
                    f"{where(i, 'consistency_token')}: a snapshot never changes; there is nothing to wait for",
                    field=where(i, "consistency_token"),
                    rule="not_with_snapshot",
                )
        if named is None:
            settings, successes, total = self.namespaces.ranking_inputs(ns)
            return _View(settings, successes, total, utcnow(), None, None)
        with self.db.read() as session:
            self.namespaces.require(session, ns)
            snap = self.snapshots.resolve(session, ns, named, field=where(0, "snapshot"))
        assert snap is not None
        pinned = self.pinned.get(snap.pk, lambda: self._load_pinned(snap.pk))
        return _View(
            ranking_settings(snap.settings, None),
            snap.outcome_successes,
            snap.outcome_total,
            snap.created_at,
            snap,
            pinned,
        )

    def _load_pinned(self, snapshot_pk: int) -> PinnedMemory:
        with self.db.read() as session:
            return PinnedMemory.build(
                snapshots_repo.list_pinned_vectors(session, snapshot_pk, self.embedder.name),
                snapshots_repo.list_pinned_lexical_texts(session, snapshot_pk),
            )

    def wait_searchable(self, ns: str, token: str, timeout_ms: int) -> int:
        """After a write: block (bounded) until what it queued is searchable from
        this process. Returns the milliseconds waited."""
        job_range = parse_token(token)
        if job_range is None:
            return 0
        waited = wait_for(self.db, ns, job_range, timeout_ms, field="wait_ms")
        self.registry.sync(ns, force=True)
        return waited

    @staticmethod
    def _filters(req: RetrieveRequest) -> repo.CandidateFilters:
        f = req.filters
        return repo.CandidateFilters(
            kinds=tuple(req.kinds),
            statuses=tuple(f.status),
            environment=req.environment,
            agent=f.agent,
            policy_version=f.policy_version,
            exclude_task_hashes=tuple(task_hash(t) for t in f.exclude_tasks),
            exclude_trajectory_ids=tuple(f.exclude_trajectory_ids),
            as_of=f.as_of,
        )

    def _prefetch(
        self, ns: str, reqs: list[RetrieveRequest], hits: list[Hits], view: _View, partial: frozenset[str]
    ) -> _Prefetched:
        """The first candidate rows of many requests in one query per distinct set of
        row filters, and their citations in one more: a batch of 1,280 states (a
        trainer's contexts) made 1,280 candidate queries before. Each request then
        keeps its own rows and applies its citation filters to them in Python
        (`CandidateFilters.admits`, the same rule as the SQL)."""
        snapshot_pk = view.snapshot.pk if view.snapshot is not None else None
        wanted: dict[repo.CandidateFilters, set[int]] = {}
        cited: set[int] = set()
        for req, (pks, _) in zip(reqs, hits, strict=True):
            filters = self._filters(req)
            wanted.setdefault(filters.without_citations(), set()).update(pks)
            if filters.cites:  # (partial admission reads the same citations)
                cited.update(pks)
        rows: dict[repo.CandidateFilters, dict[int, repo.CandidateRow]] = {}
        with self.db.read() as session:
            for base, pks in wanted.items():
                found = repo.list_candidates(session, ns, sorted(pks), base, self.embedder.name, snapshot_pk)
                rows[base] = {r.pk: r for r in found}
            citations = repo.list_citations(session, ns, sorted(cited), snapshot_pk) if cited else {}
        return _Prefetched(rows, citations)

    def _candidates(
        self,
        ns: str,
        req: RetrieveRequest,
        view: _View,
        query: Query,
        baseline: float,
        first_hits: Hits,
        prefetched: _Prefetched | None = None,
        read_rows: _ReadRows | None = None,
        *,
        partial_kinds: frozenset[str] = frozenset(),
    ) -> _Scored:
        snapshot_pk = view.snapshot.pk if view.snapshot is not None else None
        filters = self._filters(req)
        sql_filters = _sql_filters(filters, req, partial_kinds)
        split = sql_filters is not filters  # the exclusions are applied per row, by kind, below
        want = self.search.wanted(req)
        fetch = self.search.fetch_size(req)
        word_sets: dict[bool, frozenset[str]] = {}

        def words(task_keyed: bool) -> frozenset[str]:
            if task_keyed not in word_sets:
                word_sets[task_keyed] = ranking.lexical_features(query.texts.get("task" if task_keyed else "state", ""))
            return word_sets[task_keyed]

        pks, exhausted = first_hits
        while True:
            if prefetched is not None:  # the first round, fetched with the other requests'
                scored = self._score_batch_rows(
                    prefetched, view, filters, sql_filters, pks, query, baseline, words, partial_kinds
                )
                prefetched = None
            else:
                asked = read_rows.asked if read_rows is not None else frozenset()
                with self.db.read() as session:
                    rows = repo.list_candidates(
                        session, ns, sorted(pks - asked), sql_filters, self.embedder.name, snapshot_pk
                    )
                    if read_rows is not None:  # the first round: some rows are read already
                        rows = sorted([*rows, *read_rows.rows.values()], key=lambda r: r.pk)
                        read_rows = None
                    if split:
                        cites = repo.list_citations(session, ns, [r.pk for r in rows], snapshot_pk)
                        rows = [r for r in rows if _admits(filters, sql_filters, r, cites.get(r.pk, []), partial_kinds)]
                rows = [r for r in rows if "state" in r.vectors and query.for_kind(r.kind) is not None]
                scored = self._score(rows, query, view, baseline, words)
            if req.min_score is not None:
                scored = scored.keeping(scored.score >= req.min_score)
            # Filters can remove most of what the index returned: look deeper until
            # enough survive or the index has nothing more to give.
            if len(scored.order) >= want or exhausted or fetch >= 100_000:
                return scored
            fetch *= 4
            deeper, exhausted = self.search.search(ns, list(req.kinds), [query], [fetch], view.pinned)[0]
            pks = pks | deeper

    @staticmethod
    def _score(
        rows: list[repo.CandidateRow],
        query: Query,
        view: _View,
        baseline: float,
        words: Callable[[bool], frozenset[str]],
    ) -> _Scored:
        settings = view.settings.ranking
        lexical_weight = settings.lexical_weight
        lexical = RetrievalService._lexical(rows, words) if lexical_weight else [None] * len(rows)
        state_sims, internal_sims = _cosines(rows, query)
        times = [view.row_times(r.updated_at) for r in rows]
        return _ranked(
            rows,
            Gathered(
                np.arange(len(rows)),
                np.array(state_sims, dtype=float),
                np.array(internal_sims, dtype=float),  # None -> NaN
                np.array(lexical, dtype=float),
                np.array([query.is_exact(r) for r in rows], dtype=bool),
                np.array([r.successes for r in rows], dtype=float),
                np.array([r.failures for r in rows], dtype=float),
                np.array([t[0] for t in times], dtype=float),
                np.array([t[1] for t in times], dtype=float),
                np.array([r.pk for r in rows], dtype=np.int64),
            ),
            baseline,
            settings,
        )

    @staticmethod
    def _score_batch_rows(
        prefetched: _Prefetched,
        view: _View,
        filters: repo.CandidateFilters,
        sql_filters: repo.CandidateFilters,
        pks: set[int],
        query: Query,
        baseline: float,
        words: Callable[[bool], frozenset[str]],
        partial_kinds: frozenset[str],
    ) -> _Scored:
        """`_score` of a batch request's first round: its rows found in the batch's table
        (`BatchRows`), the citation filters decided once per row and filters, the
        ranking inputs gathered from the table's columns."""
        table = prefetched.table(view)
        citations = prefetched.citations
        at = table.positions(sql_filters.without_citations(), pks)
        if sql_filters.cites:
            at = table.admitted_among(
                at, (sql_filters, sql_filters), lambda r: sql_filters.admits(citations.get(r.pk, []))
            )
        if sql_filters is not filters:  # the exclusions, applied per row by kind
            at = table.admitted_among(
                at,
                (filters, sql_filters),
                lambda r: _admits(filters, sql_filters, r, citations.get(r.pk, []), partial_kinds),
            )
        settings = view.settings.ranking
        gathered = table.gather(at, query, words, settings.lexical_weight)
        return _ranked([table.rows[i] for i in gathered.at.tolist()], gathered, baseline, settings)

    @staticmethod
    def _lexical(rows: list[repo.CandidateRow], words: Callable[[bool], frozenset[str]]) -> list[float | None]:
        """Lexical similarities, state-keyed and task-keyed candidates each among their own."""
        out: list[float | None] = [None] * len(rows)
        for idx in _keyed_groups(rows):
            query = words(rows[idx[0]].kind in TASK_KEYED)
            sims = ranking.lexical_similarities_of_keys(query, [rows[i].lexical_keys() for i in idx])
            for i, sim in zip(idx, sims, strict=True):
                out[i] = sim
        return out

    def _choose(self, scored: _Scored, req: RetrieveRequest, withheld: set[int]) -> list[_Candidate]:
        """The first k in rank order (or an MMR pick from the first 3k), the withheld
        pks left out; a _Candidate is built only for these."""
        rows = scored.rows
        ordered: list[int] = scored.order.tolist()
        if withheld:
            ordered = [i for i in ordered if rows[i].pk not in withheld]
        if req.mmr_lambda is None or len(ordered) <= 1:
            return [scored.candidate(i) for i in ordered[: req.k]]
        pool = [scored.candidate(i) for i in ordered[: req.k * 3]]
        picks = ranking.mmr_order([c.score for c in pool], np.vstack([c.vector for c in pool]), req.k, req.mmr_lambda)
        return [pool[i] for i in picks]

    def _serve(
        self, ns: str, candidates: _Scored, req: RetrieveRequest, rate: float, *, unit: str
    ) -> tuple[list[_Candidate], list[tuple[int, bool, str]]]:
        """What to serve, and the holdout draws made: (reflection pk, withheld, unit).

        Each non-exact item that would be served is drawn once (holdout.withheld); a
        withheld one leaves the candidates and the choice is made again, so what moves
        up into its place is drawn in turn. Every non-exact item served was drawn, and
        no item withheld from the unit is served to it as a filler."""
        picked = self._choose(candidates, req, set())
        if rate <= 0.0:
            return picked, []
        drawn: dict[int, bool] = {}
        while True:
            fresh = [c for c in picked if not c.exact and c.row.pk not in drawn]
            for c in fresh:
                drawn[c.row.pk] = holdout.withheld(ns, unit, c.row.id, rate)
            if not any(drawn[c.row.pk] for c in fresh):
                # (MMR may drop an item served in an earlier round: only what is served counts)
                final = {c.row.pk for c in picked}
                return picked, [(pk, out, unit) for pk, out in drawn.items() if out or pk in final]
            picked = self._choose(candidates, req, {pk for pk, out in drawn.items() if out})

    def _item(self, c: _Candidate, evidence: list[tuple[str, int | None, int | None]]) -> RetrievedItem:
        row = c.row
        content = row.content
        if row.kind == "exemplar":
            n, wins, losses = row.evidence_count, row.evidence_successes, row.evidence_failures
            content.update(
                count=n,
                success_count=wins,
                failure_count=losses,
                return_to_go=row.evidence_value,
                success=None if wins == losses else wins > losses,
            )
        u = c.utility
        # model_construct: every value is the server's own, already of its field's type
        # (tests/service/retrieval/test_retrieval_items.py); validating ~10 items for each of 1,280
        # states was a tenth of a teacher-context request.
        return RetrievedItem.model_construct(
            id=row.id,
            kind=row.kind,  # type: ignore[arg-type]
            status=row.status,  # type: ignore[arg-type]
            version=row.version,
            content=content,
            text=row.text,
            score=c.score,
            similarity=c.similarity,
            lexical_similarity=c.lexical,
            exact_match=c.exact,
            state_similarity=c.state_sim,
            internal_similarity=c.internal_sim,
            utility=UtilityRead.model_construct(
                mean=u.mean, std=u.std, uses=u.uses, successes=u.successes, failures=u.failures, baseline=u.baseline
            ),
            evidence=[EvidenceRead.model_construct(trajectory_id=t, step_start=s, step_end=e) for t, s, e in evidence],
            evidence_count=row.evidence_count,
            environment=row.environment,
            created_at=row.created_at,
            updated_at=row.updated_at,
        )

    # -- outcome credit ----------------------------------------------------

    def report_outcome(
        self, principal: Principal, ns: str, retrieval_id: str, body: RetrievalOutcomeCreate
    ) -> RetrievalOutcomeRead:
        principal.require(Permission.RETRIEVE, ns)
        self.checker.json(body.details, "details")
        # a retrieve answered a moment ago may still be on its way to the database
        self.log.await_logged(ns, retrieval_ids=[retrieval_id])

        def work(session: Session) -> RetrievalOutcomeRead:
            self.namespaces.get_or_404(
                session,
                ns,
                "retrieval",
                retrieval_id,
                lambda: retrievals_repo.read_retrieval(session, ns, retrieval_id),
                field="retrieval_id",
            )
            return credit_retrieval(session, ns, retrieval_id, body)

        result = self.db.run_write(work)
        self.namespaces.outcomes_changed(ns)
        return result


def _logged_query(req: RetrieveRequest) -> dict[str, object]:
    """The request as the log keeps it (the wait and its token left out)."""
    query = req.model_dump(mode="json", exclude={"consistency_token", "wait_timeout_ms", "render"})
    if req.render is not None:
        query["render"] = req.render.model_dump(mode="json")
    return query


def _keyed_groups(rows: list[repo.CandidateRow]) -> list[list[int]]:
    """The positions of the state-keyed rows and of the task-keyed ones (each matched
    against its own query text and vector), the empty group left out."""
    groups: tuple[list[int], list[int]] = ([], [])
    for i, r in enumerate(rows):
        groups[r.kind in TASK_KEYED].append(i)
    return [g for g in groups if g]


def _ranked(rows: list[repo.CandidateRow], g: Gathered, baseline: float, settings: RankingSettings) -> _Scored:
    """The rows (`g.at` of them, in order) scored and ordered by `ranking.scores`."""
    scored = ranking.scores(
        g.state,
        g.internal,
        g.lexical,
        g.exact,
        g.successes,
        g.failures,
        g.recency,
        g.timestamps,
        g.pks,
        baseline,
        settings,
        float(settings.lexical_weight),
    )
    return _Scored(rows, g.state, g.internal, g.lexical, scored, baseline)


def _or_none(x: float) -> float | None:
    return None if math.isnan(x) else x


def _cosines(rows: list[repo.CandidateRow], query: Query) -> tuple[list[float], list[float | None]]:
    """Per row, the cosine of its state vector with the query's (the task's, for
    task-keyed kinds) and of its internal-state vector with the query's (None when
    either has none): one matrix product per query vector, not a product per row."""

    def vectors(chosen: list[repo.CandidateRow], field: str) -> np.ndarray:
        # np.array of the row vectors: ~3x faster than np.vstack for ~100 of them
        return np.array([r.vectors[field] for r in chosen])

    states: list[float] = [0.0] * len(rows)
    for idx in _keyed_groups(rows):
        vector = query.for_kind(rows[idx[0]].kind)
        sims = (vectors([rows[i] for i in idx], "state") @ vector).tolist()
        for i, sim in zip(idx, sims, strict=True):
            states[i] = sim
    internals: list[float | None] = [None] * len(rows)
    idx = [i for i, r in enumerate(rows) if "internal" in r.vectors] if query.internal is not None else []
    if idx:
        sims = (vectors([rows[i] for i in idx], "internal") @ query.internal).tolist()
        for i, sim in zip(idx, sims, strict=True):
            internals[i] = sim
    return states, internals


def _sql_filters(
    filters: repo.CandidateFilters, req: RetrieveRequest, partial_kinds: frozenset[str]
) -> repo.CandidateFilters:
    """The filters the candidate query applies: all of them, or without the
    exclusions when some of the request's kinds are admitted partially (those are
    applied per row, by kind)."""
    return _without_exclusions(filters) if partial_kinds.intersection(req.kinds) else filters


def _without_exclusions(filters: repo.CandidateFilters) -> repo.CandidateFilters:
    """The filters less the trajectory and task exclusions (applied per row by `_admits`)."""
    if not (filters.exclude_task_hashes or filters.exclude_trajectory_ids):
        return filters
    return dataclasses.replace(filters, exclude_task_hashes=(), exclude_trajectory_ids=())


def _admits(
    filters: repo.CandidateFilters,
    relaxed: repo.CandidateFilters,
    row: repo.CandidateRow,
    citations: Sequence[repo.Citation],
    partial: frozenset[str],
) -> bool:
    """The citation filters on one candidate: an item of a `partial` kind is admitted
    when any citation is neither an excluded trajectory nor of an excluded task;
    any other item when none is (CandidateFilters.admits). `relaxed` is `filters`
    less the exclusions (`_without_exclusions`), built once per request, not per row."""
    if row.kind not in partial:
        return filters.admits(citations)
    if not relaxed.admits(citations):
        return False
    trajectories, tasks = filters.excluded_trajectories, filters.excluded_tasks
    return any(c.trajectory_id not in trajectories and c.task_hash not in tasks for c in citations)
