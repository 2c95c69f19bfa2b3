"""Filling a namespace with N exemplar reflections directly in SQL (encoding 1M
texts through the API would take hours on this CPU, and one ORM row at a time through
store.reflections.create_reflection minutes more), with their vectors, evidence,
index-feed rows and lexical texts. Each reflection is the exemplar reflector's own
draft (tests/factories.exemplar_draft: reflectors.exemplars.build_exemplars) under an
id of its own; only the bulk insert is ours. On PostgreSQL the database is then
ANALYZEd, as autovacuum would have done for rows written through the API."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from datetime import UTC, datetime

import numpy as np
from sqlalchemy import insert, select, text

from bench.common.agent_states import AgentState
from bench.common.output import progress
from bench.retrieval.config import BATCH, ID_PREFIX
from store.database import create_db_engine
from store.lexical import keys_blob, text_keys
from store.models import Embedding, IndexChange, LexicalText, Namespace, Reflection, ReflectionEvidence, Trajectory
from tests.factories import exemplar_draft, step_row, trajectory_row


@dataclass
class Population:
    namespace: str
    items: int
    seconds: float
    first_pk: int  # item i has reflection pk first_pk + i


def populate(url: str, namespace: str, states: list[AgentState], vectors: np.ndarray, model: str) -> Population:
    """Exemplar reflections for items 0..n-1 (text/action of states[i % U], vector
    vectors[i]) with their embeddings, evidence and index-feed rows, in 5,000-row
    transactions; one synthetic source trajectory per 1,000 items."""
    n, u = len(vectors), len(states)
    # Each state's exemplar as the exemplar reflector builds it (content, text, status,
    # reflector; the state text its vector and lexical row hold); items take their own ids.
    built = [
        exemplar_draft(
            namespace,
            step_row(0, observation=st.observation, internal_state=st.thought, action=st.action, result=st.result),
            trajectory=trajectory_row(namespace, environment=st.environment),
        )
        for st in states
    ]
    drafts = [draft.values() for draft, _ in built]
    texts = [texts["state"] for _, texts in built]
    stamp = datetime.now(UTC)
    engine = create_db_engine(url)
    started = time.perf_counter()
    pks_all: list[int] = []
    try:
        with engine.begin() as conn:
            conn.execute(insert(Namespace), [{"name": namespace, "settings": {}, "created_at": stamp}])
            sources = conn.execute(
                insert(Trajectory).returning(Trajectory.pk, sort_by_parameter_order=True),
                [
                    {
                        "namespace": namespace,
                        "id": f"src-{j}",
                        "task": "benchmark source",
                        "task_hash": "0" * 16,
                        "environment": None,
                        "status": "closed",
                        "success": True,
                        "step_count": 1000,
                        "request_hash": "0" * 64,
                        "created_at": stamp,
                        "updated_at": stamp,
                        "closed_at": stamp,
                    }
                    for j in range(math.ceil(n / 1000))
                ],
            ).scalars()
            source_pks = list(sources)
        for start in range(0, n, BATCH):
            end = min(n, start + BATCH)
            rows = []
            for i in range(start, end):
                id_ = f"{ID_PREFIX}{i:07d}"
                rows.append(
                    {
                        **drafts[i % u],
                        "id": id_,
                        "source_key": f"exemplar:{id_}",
                        "version": 1,
                        "evidence_count": 1,
                        "evidence_successes": 1,
                        "evidence_failures": 0,
                        "evidence_value": 1.0,
                        "uses": 0,
                        "successes": 0,
                        "failures": 0,
                        "reward_sum": 0.0,
                        "created_at": stamp,
                        "updated_at": stamp,
                    }
                )
            with engine.begin() as conn:
                # executemany, then read the keys back (RETURNING with a guaranteed
                # order makes SQLAlchemy insert row by row on SQLite: 3x slower).
                conn.execute(insert(Reflection), rows)
                got = conn.execute(
                    select(Reflection.pk, Reflection.id)
                    .where(Reflection.namespace == namespace, Reflection.id.in_([r["id"] for r in rows]))
                    .order_by(Reflection.pk)
                ).all()
                if [i for _, i in got] != [r["id"] for r in rows]:
                    raise RuntimeError("reflections were not stored in insert order")
                pks = [pk for pk, _ in got]
                conn.execute(
                    insert(Embedding),
                    [
                        {
                            "reflection_pk": pk,
                            "namespace": namespace,
                            "kind": "exemplar",
                            "field": "state",
                            "model": model,
                            "dim": vectors.shape[1],
                            "vector": np.ascontiguousarray(vectors[i], dtype="<f4").tobytes(),
                            "created_at": stamp,
                        }
                        for i, pk in zip(range(start, end), pks, strict=True)
                    ],
                )
                # Their state texts in the lexical index, as the worker writes them: a
                # retrieve's lexical search runs against the real index.
                conn.execute(
                    insert(LexicalText),
                    [
                        {
                            "reflection_pk": pk,
                            "namespace": namespace,
                            "kind": "exemplar",
                            "text": texts[i % u],
                            "keys": keys_blob(text_keys(texts[i % u])),
                        }
                        for i, pk in zip(range(start, end), pks, strict=True)
                    ],
                )
                conn.execute(
                    insert(ReflectionEvidence),
                    [
                        {
                            "reflection_pk": pk,
                            "trajectory_pk": source_pks[i // 1000],
                            "step_start": i % 1000,
                            "step_end": i % 1000,
                            "success": True,
                            "value": 1.0,
                        }
                        for i, pk in zip(range(start, end), pks, strict=True)
                    ],
                )
                conn.execute(
                    insert(IndexChange),
                    [
                        {
                            "namespace": namespace,
                            "kind": "exemplar",
                            "reflection_pk": pk,
                            "op": "upsert",
                            "created_at": stamp,
                        }
                        for pk in pks
                    ],
                )
            pks_all.extend(pks)
            if n >= 200_000 and (end // BATCH) % 40 == 0:
                progress(f"    {end:,} / {n:,} rows ({time.perf_counter() - started:.0f} s)")
        if engine.dialect.name == "postgresql":
            # Statistics as autovacuum keeps them for rows written through the API; a bulk
            # fill measured at once has none, and PostgreSQL then plans a retrieve's reads
            # for near-empty tables (docs/benchmarks.md, "Retrieval on PostgreSQL")
            with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
                conn.execute(text("ANALYZE"))
    finally:
        engine.dispose()
    first = pks_all[0]
    if pks_all != list(range(first, first + n)):
        raise RuntimeError("reflection pks are not contiguous; cannot map index ids back to items")
    return Population(namespace, n, time.perf_counter() - started, first)
