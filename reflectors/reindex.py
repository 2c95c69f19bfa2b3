"""`reflexa reindex`: make the vector indexes whole again from SQL.

Vectors are derived data. When the embedding model changes (or rows were written
without vectors), the reflections lacking a vector for the current model are
re-encoded in pages, outside any transaction, and written with feed entries so
every running process picks them up. Exemplar occurrences get their internal-state
hashes recomputed from their steps (what makes a merged exemplar exact under each).
Then the namespace's index snapshot is rebuilt from the embeddings table.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from domain.hashing import text_hash
from domain.reflections import TASK_KEYED
from domain.settings import NamespaceSettings
from domain.state_text import internal_text
from reflectors.contrastive import NAME as CONTRASTIVE
from reflectors.embed import encode_texts, reflection_texts, text_hashes, write_vectors
from service.namespaces.stored import read_settings
from store import embeddings as embeddings_repo
from store import evidence as evidence_repo
from store import index_feed
from store import lexical as lexical_repo
from store import reflections as repo
from store.database import Database
from store.embedding.base import Embedder
from store.index_registry import IndexRegistry
from store.models import Reflection

PAGE = 512


def _pages(
    db: Database, namespace: str, read: Callable[..., list[Reflection]], which: object
) -> Iterator[tuple[NamespaceSettings, list[Reflection]]]:
    """The namespace's settings and each page of `read(session, namespace, which,
    after_pk=, limit=PAGE)`, in pk order (each read in a unit of its own, the next
    after what the caller did with this one), until one comes back empty."""
    after = 0
    while True:
        with db.read() as session:
            settings = read_settings(session, namespace)
            rows = read(session, namespace, which, after_pk=after, limit=PAGE)
        if not rows:
            return
        yield settings, rows
        after = rows[-1].pk


def reembed_missing(db: Database, embedder: Embedder, namespace: str) -> int:
    """Encode reflections that have no state vector of this model; returns how many."""
    done = 0
    for settings, rows in _pages(db, namespace, embeddings_repo.list_reflections_without_vector, embedder.name):
        texts = [reflection_texts(r, settings) for r in rows]
        vectors = encode_texts(embedder, texts)
        with db.write() as session:
            for r, vecs, t in zip(rows, vectors, texts, strict=True):
                current = session.get(Reflection, r.pk)
                if current is not None:  # it may have gone while we encoded
                    write_vectors(session, current, embedder.name, vecs, t)
        done += len(rows)
    return done


# Kinds whose vectors encode exactly `reflection_texts`; heuristics and skills do
# too, but for a contrastive heuristic's (a centroid of states, not a text's).
HASHABLE = frozenset({"exemplar", *TASK_KEYED})
TEXT_KINDS = sorted({*HASHABLE, "heuristic", "skill"})


def encodes_its_text(row: Reflection) -> bool:
    return row.kind in HASHABLE or (row.kind in TEXT_KINDS and row.reflector != CONTRASTIVE)


def backfill_text_hashes(db: Database, *, namespace: str, model: str) -> int:
    """Give vectors written before migration 0005 the hash of the text they encode
    (no re-encoding); returns how many reflections were filled in."""
    done = 0
    for settings, rows in _pages(db, namespace, embeddings_repo.list_reflections_without_text_hash, model):
        with db.write() as session:
            for r in rows:
                if encodes_its_text(r):
                    embeddings_repo.update_text_hashes(session, r.pk, model, text_hashes(reflection_texts(r, settings)))
                    done += 1
    return done


def rebuild_internal_hashes(db: Database, namespace: str) -> int:
    """Recompute the internal-state hash of every exemplar occurrence from its step
    (rows written before migration 0010, or under another `state_text.max_chars`),
    and each exemplar's set of them; returns how many exemplars changed."""
    done = 0
    for settings, rows in _pages(db, namespace, repo.list_reflections_in_pk_order, ["exemplar"]):
        pks = [r.pk for r in rows]
        max_chars = settings.state_text.max_chars
        with db.write() as session:
            index_feed.lock_feed(session, namespace)  # exemplar writes take it too: no stale set overwrites theirs
            changed: dict[int, str | None] = {}
            for occ in evidence_repo.list_occurrences(session, pks):
                i_text = internal_text(occ.internal_state, max_chars)
                digest = i_text and text_hash(i_text)
                if digest != occ.internal_hash:
                    changed[occ.evidence_pk] = digest
            done += evidence_repo.update_internal_hashes(session, changed, pks)
    return done


def rebuild_lexical(db: Database, namespace: str) -> int:
    """Write the lexical text of every reflection whose vector encodes a text (from
    SQL, as the workers write it); returns how many."""
    done = 0
    for settings, rows in _pages(db, namespace, repo.list_reflections_in_pk_order, TEXT_KINDS):
        with db.write() as session:
            for r in filter(encodes_its_text, rows):
                lexical_repo.update_lexical_text(
                    session,
                    reflection_pk=r.pk,
                    namespace=namespace,
                    kind=r.kind,
                    text_=reflection_texts(r, settings)["state"],
                )
            done += sum(map(encodes_its_text, rows))
    return done


def reindex(db: Database, embedder: Embedder, registry: IndexRegistry, namespaces: list[str]) -> dict[str, int]:
    """Re-encode what lacks vectors, rebuild and save each namespace's indexes.
    Returns namespace -> vectors indexed."""
    out = {}
    for namespace in namespaces:
        reembed_missing(db, embedder, namespace)
        backfill_text_hashes(db, namespace=namespace, model=embedder.name)
        rebuild_internal_hashes(db, namespace)
        rebuild_lexical(db, namespace)
        out[namespace] = registry.rebuild(namespace)
        registry.save(namespace)
    return out
