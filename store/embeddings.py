"""Reflection vectors: one per (reflection, field, model), stored in SQL so the
vector indexes can always be rebuilt from here."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from sqlalchemy import exists, select, update
from sqlalchemy.orm import Session

from store.database import dialect_insert
from store.models import Embedding, Reflection, utcnow


def update_embeddings(
    session: Session,
    *,
    reflection_pk: int,
    namespace: str,
    kind: str,
    model: str,
    vectors: Mapping[str, np.ndarray],
    text_hashes: Mapping[str, str] | None = None,
) -> None:
    """Store one vector per field for this model, replacing an older one, with the
    hash of the text it encodes where there is one."""
    hashes = text_hashes or {}
    for field, vec in vectors.items():
        data = np.ascontiguousarray(vec, dtype="<f4").tobytes()
        digest = hashes.get(field)
        stmt = (
            dialect_insert(session)(Embedding)
            .values(
                reflection_pk=reflection_pk,
                namespace=namespace,
                kind=kind,
                field=field,
                model=model,
                dim=int(vec.shape[0]),
                vector=data,
                text_hash=digest,
                created_at=utcnow(),
            )
            .on_conflict_do_update(
                index_elements=["reflection_pk", "field", "model"],
                set_={"vector": data, "dim": int(vec.shape[0]), "text_hash": digest},
            )
        )
        session.execute(stmt)


def read_embeddings(session: Session, reflection_pks: Sequence[int], model: str) -> dict[int, dict[str, np.ndarray]]:
    """pk -> {field: vector} for the given model."""
    out: dict[int, dict[str, np.ndarray]] = {}
    if not reflection_pks:
        return out
    stmt = select(Embedding.reflection_pk, Embedding.field, Embedding.vector).where(
        Embedding.reflection_pk.in_(list(reflection_pks)), Embedding.model == model
    )
    for pk, field, blob in session.execute(stmt):
        out.setdefault(pk, {})[field] = np.frombuffer(blob, dtype="<f4")
    return out


def list_embedded_kinds(session: Session, namespace: str, model: str) -> list[tuple[str, str]]:
    """The (kind, field) pairs that have vectors of this model in the namespace."""
    stmt = (
        select(Embedding.kind, Embedding.field)
        .where(Embedding.namespace == namespace, Embedding.model == model)
        .distinct()
    )
    return [(k, f) for k, f in session.execute(stmt)]


def list_reflections_without_vector(
    session: Session, namespace: str, model: str, *, after_pk: int, limit: int
) -> list[Reflection]:
    """Reflections lacking a state vector of this model (a changed model, a
    re-encode), in pk order from `after_pk`."""
    has_vector = exists().where(
        Embedding.reflection_pk == Reflection.pk, Embedding.model == model, Embedding.field == "state"
    )
    stmt = (
        select(Reflection)
        .where(Reflection.namespace == namespace, Reflection.pk > after_pk, ~has_vector)
        .order_by(Reflection.pk)
        .limit(limit)
    )
    return list(session.scalars(stmt))


def list_embedding_page(
    session: Session, namespace: str, kind: str, field: str, model: str, *, after_pk: int, limit: int
) -> list[tuple[int, int, bytes]]:
    """(embedding pk, reflection pk, vector bytes) pages, for full index rebuilds."""
    stmt = (
        select(Embedding.pk, Embedding.reflection_pk, Embedding.vector)
        .where(
            Embedding.namespace == namespace,
            Embedding.kind == kind,
            Embedding.field == field,
            Embedding.model == model,
            Embedding.pk > after_pk,
        )
        .order_by(Embedding.pk)
        .limit(limit)
    )
    return [(a, b, c) for a, b, c in session.execute(stmt)]


def list_reflections_without_text_hash(
    session: Session, namespace: str, model: str, *, after_pk: int, limit: int
) -> list[Reflection]:
    """Reflections whose state vector of this model has no text hash (written before
    migration 0005), in pk order from `after_pk`: `reflexa reindex` fills them in."""
    missing = exists().where(
        Embedding.reflection_pk == Reflection.pk,
        Embedding.model == model,
        Embedding.field == "state",
        Embedding.text_hash.is_(None),
    )
    stmt = (
        select(Reflection)
        .where(Reflection.namespace == namespace, Reflection.pk > after_pk, missing)
        .order_by(Reflection.pk)
        .limit(limit)
    )
    return list(session.scalars(stmt))


def update_text_hashes(session: Session, reflection_pk: int, model: str, text_hashes: Mapping[str, str]) -> None:
    """Set the text hashes of a reflection's stored vectors (the vectors stay)."""
    for field, digest in text_hashes.items():
        session.execute(
            update(Embedding)
            .where(Embedding.reflection_pk == reflection_pk, Embedding.model == model, Embedding.field == field)
            .values(text_hash=digest)
        )


def read_vectors_by_text_hash(session: Session, model: str, hashes: Sequence[str]) -> dict[str, np.ndarray]:
    """text hash -> a stored vector of this model that encodes that text (any
    reflection's: the same text under the same model is the same vector)."""
    out: dict[str, np.ndarray] = {}
    unique = sorted(set(hashes))
    for start in range(0, len(unique), 500):  # bounded IN lists
        chunk = unique[start : start + 500]
        stmt = select(Embedding.text_hash, Embedding.vector).where(
            Embedding.model == model, Embedding.text_hash.in_(chunk)
        )
        for digest, blob in session.execute(stmt):
            out.setdefault(digest, np.frombuffer(blob, dtype="<f4"))
    return out
