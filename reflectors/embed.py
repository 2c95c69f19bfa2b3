"""Vectors for reflections: which texts a reflection is matched by, and the job
that re-encodes one after an operator edits it.

An exemplar is matched by its state text (built from its observation and state
data exactly as a query state is) and its internal state; evidence cards and
rubrics by their task; other kinds by their `text` (their trigger / when-to-use).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from sqlalchemy import delete
from sqlalchemy.orm import Session

from domain.hashing import text_hash
from domain.jobs import REFLECTION_EMBED
from domain.reflections import TASK_KEYED
from domain.settings import NamespaceSettings
from domain.state_text import internal_text, state_text, task_query_text
from reflectors.registry import Reflector, register
from reflectors.worker import JobView, Write
from service.namespaces.stored import read_settings
from store import embeddings as embeddings_repo
from store import index_feed
from store import lexical as lexical_repo
from store.database import Database
from store.embedding.base import Embedder
from store.models import Embedding, Reflection


def reflection_texts(row: Reflection, settings: NamespaceSettings) -> dict[str, str]:
    """field -> text to embed for this reflection."""
    if row.kind in TASK_KEYED:
        return {"state": task_query_text(row.task or "")[: settings.state_text.max_chars]}
    if row.kind != "exemplar":
        return {"state": row.text[: settings.state_text.max_chars]}
    c = row.content
    texts = {
        "state": state_text(
            settings.state_text, observation=c.get("observation", ""), data=c.get("state_data"), task=row.task
        )
    }
    internal = internal_text(c.get("internal_state"), settings.state_text.max_chars)
    if internal:
        texts["internal"] = internal
    return texts


def encode_texts(
    embedder: Embedder, per_row: list[dict[str, str]], db: Database | None = None
) -> list[dict[str, np.ndarray]]:
    """Vectors for many rows' texts: each distinct text encoded once, in one batched
    call. With `db`, a text some stored vector of this model already encodes (the
    same text hash) is not encoded again: its vector is reused (agents repeat their
    states and plans; a restarted or another worker process has an empty cache)."""
    flat = [(i, field, text, text_hash(text)) for i, texts in enumerate(per_row) for field, text in texts.items()]
    distinct = {digest: text for _, _, text, digest in flat}
    known: dict[str, np.ndarray] = {}
    if db is not None and distinct:
        with db.read() as session:
            known = embeddings_repo.read_vectors_by_text_hash(session, embedder.name, list(distinct))
    missing = [digest for digest in distinct if digest not in known]
    if missing:
        known.update(zip(missing, embedder.encode([distinct[d] for d in missing]), strict=True))
    out: list[dict[str, np.ndarray]] = [{} for _ in per_row]
    for i, field, _, digest in flat:
        out[i][field] = known[digest]
    return out


def text_hashes(texts: Mapping[str, str]) -> dict[str, str]:
    """field -> the hash stored beside the field's vector (an exact match is the same hash)."""
    return {field: text_hash(text) for field, text in texts.items()}


def write_vectors(
    session: Session,
    row: Reflection,
    model: str,
    vectors: Mapping[str, np.ndarray],
    texts: Mapping[str, str] | None = None,
) -> None:
    """Replace the row's vectors of this model (a field no longer present goes) and
    put the row on the index feed. `texts`, when the vectors encode texts (not, say,
    a centroid): the hash of each is stored beside its vector, and the state text
    goes into the lexical index."""
    index_feed.lock_feed(session, row.namespace)
    session.execute(
        delete(Embedding).where(
            Embedding.reflection_pk == row.pk, Embedding.model == model, Embedding.field.not_in(list(vectors))
        )
    )
    embeddings_repo.update_embeddings(
        session,
        reflection_pk=row.pk,
        namespace=row.namespace,
        kind=row.kind,
        model=model,
        vectors=vectors,
        text_hashes=text_hashes(texts) if texts else None,
    )
    if texts and "state" in texts:
        lexical_repo.update_lexical_text(
            session, reflection_pk=row.pk, namespace=row.namespace, kind=row.kind, text_=texts["state"]
        )
    index_feed.create_changes(session, row.namespace, [(row.kind, row.pk, "upsert")])


class ReembedReflection:
    """Job handler for `reflection.embed` (queued by an edit)."""

    def __init__(self, db: Database, embedder: Embedder) -> None:
        self.db = db
        self.embedder = embedder

    def __call__(self, job: JobView) -> Write | None:
        with self.db.read() as session:
            row = session.get(Reflection, job.payload["reflection_pk"])
            if row is None or row.version != job.payload["version"]:
                return None  # deleted, or edited again: the newer version's job does the work
            texts = reflection_texts(row, read_settings(session, row.namespace))
        vectors = encode_texts(self.embedder, [texts], self.db)[0]  # no transaction open

        def write(session: Session) -> None:
            current = session.get(Reflection, row.pk)
            if current is not None and current.version == job.payload["version"]:
                write_vectors(session, current, self.embedder.name, vectors, texts)

        return write


register(
    Reflector(
        name="reembed",
        version="1",
        job=REFLECTION_EMBED,
        build=lambda deps: ReembedReflection(deps.db, deps.embedder),
    )
)
