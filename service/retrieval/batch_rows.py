"""A batch's prefetched candidate rows as one table of arrays.

A teacher-contexts request is one batch of ~1,280 retrieves over a few thousand
distinct rows. Each request's first-round candidates are positions in this table, and
the inputs of its ranking (cosines, lexical similarities, exact matches, counts and
times) are gathered from columns made once for the batch, instead of being built from
the rows, a Python pass per input, for every request. Every value is the one the
per-row path makes (tests/service/retrieval/test_batch_rows.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from domain.reflections import TASK_KEYED
from service.retrieval import ranking
from service.retrieval import repository as repo
from service.retrieval.candidates import Query


@dataclass(frozen=True)
class Gathered:
    """One request's candidates (`at`: their positions in the table, ascending pk;
    the per-row path's own rows: 0..n-1) and the per-candidate inputs of
    `ranking.scores`; NaN where an internal or lexical similarity is missing."""

    at: np.ndarray
    state: np.ndarray
    internal: np.ndarray
    lexical: np.ndarray
    exact: np.ndarray
    successes: np.ndarray
    failures: np.ndarray
    recency: np.ndarray
    timestamps: np.ndarray
    pks: np.ndarray


@dataclass
class _Lexical:
    """Every row's lexical keys as positions in the batch's vocabulary, end to end."""

    vocabulary: np.ndarray
    flat: np.ndarray  # uint16
    starts: np.ndarray
    lengths: np.ndarray
    present: np.ndarray  # the row has a lexical text


@dataclass
class BatchRows:
    rows: list[repo.CandidateRow]  # every prefetched row once, ascending pk
    pks: np.ndarray
    groups: dict[repo.CandidateFilters, np.ndarray]  # row filters -> passed them, per position
    task_keyed: np.ndarray
    vectors: dict[str, tuple[np.ndarray, np.ndarray]]  # field -> (row has one, matrix; zeros where not)
    state_hashes: np.ndarray  # the code of each row's state text hash (-1: none)
    codes: dict[str, int]
    columns: np.ndarray  # successes, failures, recency factor, updated_at timestamp: 4 × rows
    lexical: _Lexical | None  # None: the vocabulary is too big for positions (keys are used)
    # (filters, row filters) -> per position: 1 admitted, 0 not, -1 not decided yet
    admitted: dict[tuple[repo.CandidateFilters, repo.CandidateFilters], np.ndarray] = field(default_factory=dict)

    @classmethod
    def build(
        cls,
        by_filters: dict[repo.CandidateFilters, dict[int, repo.CandidateRow]],
        row_times: Callable[[repo.CandidateRow], tuple[float, float]],
    ) -> BatchRows:
        """The table of every row of `by_filters` (row filters -> pk -> row, as a batch
        reads them); `row_times(row)`: its recency factor and `updated_at` timestamp."""
        every = {pk: r for group in by_filters.values() for pk, r in group.items()}
        pks = np.array(sorted(every), dtype=np.int64)
        rows = [every[pk] for pk in pks.tolist()]
        groups = {base: np.isin(pks, np.fromiter(g, dtype=np.int64, count=len(g))) for base, g in by_filters.items()}
        vectors: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        for name in ("state", "internal"):
            has = np.array([name in r.vectors for r in rows], dtype=bool)
            if has.any():
                found = [r.vectors[name] for r in rows if name in r.vectors]
                matrix = np.zeros((len(rows), len(found[0])), dtype=found[0].dtype)
                matrix[has] = np.array(found)
                vectors[name] = (has, matrix)
        codes: dict[str, int] = {}
        state_hashes = np.array(
            [-1 if (h := r.text_hashes.get("state")) is None else codes.setdefault(h, len(codes)) for r in rows],
            dtype=np.int64,
        )
        times = [row_times(r) for r in rows]
        columns = np.array(
            [
                [r.successes for r in rows],
                [r.failures for r in rows],
                [t[0] for t in times],
                [t[1] for t in times],
            ],
            dtype=float,
        ).reshape(4, len(rows))
        return cls(
            rows,
            pks,
            groups,
            np.array([r.kind in TASK_KEYED for r in rows], dtype=bool),
            vectors,
            state_hashes,
            codes,
            columns,
            _lexical(rows),
        )

    def positions(self, base: repo.CandidateFilters, pks: set[int]) -> np.ndarray:
        """The positions of the rows among `pks` that passed the row filters `base`,
        ascending (by pk)."""
        asked = np.fromiter(pks, dtype=np.int64, count=len(pks))
        at = np.searchsorted(self.pks, asked)
        inside = at < len(self.pks)
        at = at[inside][self.pks[at[inside]] == asked[inside]]
        at.sort()
        return at[self.groups[base][at]]

    def admitted_among(
        self,
        at: np.ndarray,
        key: tuple[repo.CandidateFilters, repo.CandidateFilters],
        decide: Callable[[repo.CandidateRow], bool],
    ) -> np.ndarray:
        """`at` less the rows `decide` refuses, each row decided once per `key` (the
        steps of one episode ask with equal filters for mostly the same rows)."""
        known = self.admitted.get(key)
        if known is None:
            known = self.admitted[key] = np.full(len(self.rows), -1, dtype=np.int8)
        for i in at[known[at] < 0].tolist():
            known[i] = decide(self.rows[i])
        return at[known[at] == 1]

    def gather(
        self,
        at: np.ndarray,
        query: Query,
        words: Callable[[bool], frozenset[str]],
        lexical_weight: float,
    ) -> Gathered:
        """The request's candidates among `at` (those with a state vector and, for the
        task-keyed kinds, a query task to match) with their ranking inputs."""
        has_state, states = self.vectors.get("state", (np.zeros(len(self.rows), dtype=bool), None))
        keyed = self.task_keyed[at]
        keep = has_state[at]
        if query.task is None:
            keep &= ~keyed
        at = at[keep]
        keyed = keyed[keep]
        n = len(at)
        state = np.zeros(n, dtype=float)
        lexical = np.full(n, np.nan)
        exact = np.zeros(n, dtype=bool)
        for task_keyed in (False, True):  # the state-keyed rows, then the task-keyed ones (`_keyed_groups`)
            idx = np.flatnonzero(keyed == task_keyed)
            if not len(idx):
                continue
            vector = query.task if task_keyed else query.state
            assert vector is not None and states is not None
            state[idx] = (states[at[idx]] @ vector).tolist()
            if lexical_weight:
                lexical[idx] = self._lexical(at[idx], words(task_keyed))
            exact[idx] = self._exact(at[idx], query.hashes.get("task" if task_keyed else "state"), query)
        internal = np.full(n, np.nan)
        if query.internal is not None and "internal" in self.vectors:
            has_internal, internals = self.vectors["internal"]
            idx = np.flatnonzero(has_internal[at])
            if len(idx):
                internal[idx] = (internals[at[idx]] @ query.internal).tolist()
        successes, failures, recency, timestamps = self.columns[:, at]
        return Gathered(at, state, internal, lexical, exact, successes, failures, recency, timestamps, self.pks[at])

    def _lexical(self, at: np.ndarray, query: frozenset[str]) -> np.ndarray:
        """The lexical similarities of the rows at `at` among themselves (NaN: no text)."""
        lex = self.lexical
        if lex is None:
            sims = ranking.lexical_similarities_of_keys(query, [self.rows[i].lexical_keys() for i in at.tolist()])
            return np.array(sims, dtype=float)
        out = np.full(len(at), np.nan)
        present = np.flatnonzero(lex.present[at])
        if not len(present):
            return out
        rows = at[present]
        lengths = lex.lengths[rows]
        # each row's run of the flat ranks, gathered end to end without a Python loop
        ends = np.cumsum(lengths)
        index = np.arange(ends[-1]) + np.repeat(lex.starts[rows] - (ends - lengths), lengths)
        sims = ranking.lexical_similarities_of_runs(query, lex.flat[index], lengths, lex.vocabulary)
        if sims is not None:
            out[present] = sims
        return out

    def _exact(self, at: np.ndarray, main: str | None, query: Query) -> np.ndarray:
        """`query.is_exact` of the rows at `at`: asked only of the rows whose state
        text is the query's (few, or none)."""
        out = np.zeros(len(at), dtype=bool)
        code = self.codes.get(main) if main is not None else None
        if code is None:
            return out
        for j in np.flatnonzero(self.state_hashes[at] == code).tolist():
            out[j] = query.is_exact(self.rows[at[j]])
        return out


def _lexical(rows: list[repo.CandidateRow]) -> _Lexical | None:
    keys = [r.lexical_keys() for r in rows]
    present = np.array([k is not None for k in keys], dtype=bool)
    made = ranking.feature_ranks([k for k in keys if k is not None])
    if made is None:
        return None
    vocabulary, ranks = made
    lengths = np.zeros(len(rows), dtype=np.intp)
    lengths[present] = [len(r) for r in ranks]
    starts = np.zeros(len(rows), dtype=np.intp)
    np.cumsum(lengths[:-1], out=starts[1:])
    flat = np.concatenate(ranks) if ranks else np.empty(0, dtype=np.uint16)
    return _Lexical(vocabulary, flat, starts, lengths, present)
