"""`reflexa reindex`: make the vector indexes whole again from SQL.

Vectors are derived data. When the embedding model changes (or rows were written
without vectors), the reflections lacking a vector for the current model are
re-encoded in pages, outside any transaction, and written with feed entries so
every running process picks them up. Then the namespace's index snapshot is
rebuilt from the embeddings table.
"""

from __future__ import annotations

from domain.settings import read_settings
from reflectors.embed import encode_texts, reflection_texts, write_vectors
from store import embeddings as embeddings_repo
from store.database import Database
from store.embedding.base import Embedder
from store.index_registry import IndexRegistry
from store.models import Reflection

PAGE = 512


def reembed_missing(db: Database, embedder: Embedder, namespace: str) -> int:
    """Encode reflections that have no state vector of this model; returns how many."""
    done = 0
    after = 0
    while True:
        with db.read() as session:
            settings = read_settings(session, namespace)
            rows = embeddings_repo.list_reflections_without_vector(
                session, namespace, embedder.name, after_pk=after, limit=PAGE
            )
        if not rows:
            return done
        vectors = encode_texts(embedder, [reflection_texts(r, settings) for r in rows])
        with db.write() as session:
            for r, vecs in zip(rows, vectors, strict=True):
                current = session.get(Reflection, r.pk)
                if current is not None:  # it may have gone while we encoded
                    write_vectors(session, current, embedder.name, vecs)
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
