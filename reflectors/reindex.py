"""`reflexa reindex`: make the vector indexes whole again from SQL.

Vectors are derived data. When the embedding model changes (or rows were written
without vectors), the reflections lacking a vector for the current model are
re-encoded in pages, outside any transaction, and written with feed entries so
every running process picks them up. Then the namespace's index snapshot is
rebuilt from the embeddings table.
"""

from __future__ import annotations

from domain.reflections import TASK_KEYED
from domain.settings import read_settings
from reflectors.embed import encode_texts, reflection_texts, text_hashes, write_vectors
from store import embeddings as embeddings_repo
from store import lexical as lexical_repo
from store import reflections as repo
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
        texts = [reflection_texts(r, settings) for r in rows]
        vectors = encode_texts(embedder, texts)
        with db.write() as session:
            for r, vecs, t in zip(rows, vectors, texts, strict=True):
                current = session.get(Reflection, r.pk)
                if current is not None:  # it may have gone while we encoded
                    write_vectors(session, current, embedder.name, vecs, t)
        done += len(rows)
        after = rows[-1].pk


# Kinds whose vectors encode exactly `reflection_texts` (a contrastive heuristic's
# vector is a centroid of states, not the encoding of a text).
HASHABLE = frozenset({"exemplar", *TASK_KEYED})


def backfill_text_hashes(db: Database, *, namespace: str, model: str) -> int:
    """Give vectors written before migration 0005 the hash of the text they encode
    (no re-encoding); returns how many reflections were filled in."""
    done = 0
    after = 0
    while True:
        with db.read() as session:
            settings = read_settings(session, namespace)
            rows = embeddings_repo.list_reflections_without_text_hash(
                session, namespace, model, after_pk=after, limit=PAGE
            )
        if not rows:
            return done
        with db.write() as session:
            for r in rows:
                if r.kind in HASHABLE:
                    embeddings_repo.update_text_hashes(session, r.pk, model, text_hashes(reflection_texts(r, settings)))
                    done += 1
        after = rows[-1].pk


def rebuild_lexical(db: Database, namespace: str) -> int:
    """Write the lexical text of every reflection whose vector encodes a text (from
    SQL, as the workers write it); returns how many."""
    done = 0
    after = 0
    while True:
        with db.read() as session:
            settings = read_settings(session, namespace)
            rows = repo.list_reflections_in_pk_order(session, namespace, sorted(HASHABLE), after_pk=after, limit=PAGE)
        if not rows:
            return done
        with db.write() as session:
            for r in rows:
                lexical_repo.update_lexical_text(
                    session,
                    reflection_pk=r.pk,
                    namespace=namespace,
                    kind=r.kind,
                    text_=reflection_texts(r, settings)["state"],
                )
        done += len(rows)
        after = rows[-1].pk


def reindex(db: Database, embedder: Embedder, registry: IndexRegistry, namespaces: list[str]) -> dict[str, int]:
    """Re-encode what lacks vectors, rebuild and save each namespace's indexes.
    Returns namespace -> vectors indexed."""
    out = {}
    for namespace in namespaces:
        reembed_missing(db, embedder, namespace)
        backfill_text_hashes(db, namespace=namespace, model=embedder.name)
        rebuild_lexical(db, namespace)
        out[namespace] = registry.rebuild(namespace)
        registry.save(namespace)
    return out
