"""`reflexa reindex`: make the vector indexes whole again from SQL.

Vectors are derived data. When the embedding model changes (or rows were written
without vectors), the reflections lacking a vector for the current model are
re-encoded in pages, outside any transaction, and written with feed entries so
every running process picks them up. Then the namespace's index snapshot is
rebuilt from the embeddings table.
"""

from __future__ import annotations

from sqlalchemy import exists, select

from reflectors.exemplars import KIND as EXEMPLAR
from service.namespaces.schemas import parse_settings
from service.retrieval.state_text import internal_text, state_text
from store import namespaces as namespaces_repo
from store import reflections as repo
from store.database import Database
from store.embedding.base import Embedder
from store.index_registry import IndexRegistry
from store.models import Embedding, Reflection

PAGE = 512


def reembed_missing(db: Database, embedder: Embedder, namespace: str) -> int:
    """Encode exemplars that have no state vector of this model; returns how many."""
    done = 0
    after = 0
    while True:
        with db.read() as session:
            ns = namespaces_repo.get_namespace(session, namespace)
            settings = parse_settings(ns.settings if ns else {})
            has_vector = exists().where(
                Embedding.reflection_pk == Reflection.pk, Embedding.model == embedder.name, Embedding.field == "state"
            )
            rows = list(
                session.scalars(
                    select(Reflection)
                    .where(Reflection.namespace == namespace, Reflection.kind == EXEMPLAR, Reflection.pk > after)
                    .where(~has_vector)
                    .order_by(Reflection.pk)
                    .limit(PAGE)
                )
            )
        if not rows:
            return done
        texts = [
            state_text(
                settings.state_text, observation=r.content["observation"], data=r.content.get("state_data"), task=r.task
            )
            for r in rows
        ]
        internals = [
            (i, internal_text(r.content.get("internal_state"), settings.state_text.max_chars))
            for i, r in enumerate(rows)
        ]
        internals = [(i, t) for i, t in internals if t]
        matrix = embedder.encode(texts + [t for _, t in internals])
        vectors: dict[int, dict] = {r.pk: {"state": matrix[i]} for i, r in enumerate(rows)}
        for j, (i, _) in enumerate(internals):
            vectors[rows[i].pk]["internal"] = matrix[len(rows) + j]
        with db.write() as session:
            repo.lock_feed(session, namespace)
            for r in rows:
                repo.upsert_embeddings(
                    session,
                    reflection_pk=r.pk,
                    namespace=namespace,
                    kind=r.kind,
                    model=embedder.name,
                    vectors=vectors[r.pk],
                )
            repo.append_changes(session, namespace, [(r.kind, r.pk, "upsert") for r in rows])
        done += len(rows)
        after = rows[-1].pk


def reindex(db: Database, embedder: Embedder, registry: IndexRegistry, namespaces: list[str]) -> dict[str, int]:
    """Re-encode what lacks vectors, rebuild and save each namespace's indexes.
    Returns namespace -> vectors indexed."""
    out = {}
    for namespace in namespaces:
        reembed_missing(db, embedder, namespace)
        out[namespace] = registry.rebuild(namespace)
        registry.save(namespace)
    return out
