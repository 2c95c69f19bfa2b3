"""The lexical index of state text: rows in `lexical_texts`, searched by the
engine's own full-text index (SQLite FTS5 with bm25; PostgreSQL tsvector with a
GIN index and ts_rank), written in the same transaction as the vectors, so it is
never behind SQL and needs no catch-up.

Queries are the distinct word tokens of the query text OR-ed together: a state
that shares a rare token ("20 steps left") ranks above one that shares only
common ones.

Each row also stores its text's feature keys (`text_keys`: the words and the
ordered pairs one or two apart, as sorted 64-bit keys), which the ranking's
lexical similarity reads with the candidate: keying a text takes ~20-30 us, and a
fresh query's candidates are mostly texts the process has not keyed yet. The keys
are the same in every process; a change to how they are made needs a migration
that rewrites them (as 0019 wrote them first).
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Callable, Sequence

import numpy as np
from sqlalchemy import TextClause, text
from sqlalchemy.orm import Session

from store.database import dialect_insert
from store.models import LexicalText

_TOKEN = re.compile(r"\w+", re.UNICODE)
MAX_QUERY_TOKENS = 64
MAX_TOKEN_CHARS = 100  # longer "words" (a hash, a run of digits) are no words to search by


def tokens(value: str) -> list[str]:
    """Lower-cased word tokens, numbers and one-letter words included, in order."""
    return [t.lower() for t in _TOKEN.findall(value)]


def replace_token(value: str, index: int, word: str) -> str:
    """`value` with its token number `index` (as `tokens` counts) replaced by `word`,
    capitalised where the old one was: a near text that reads like the original."""
    match = list(_TOKEN.finditer(value))[index]
    new = word.capitalize() if match.group()[:1].isupper() else word
    return value[: match.start()] + new + value[match.end() :]


def update_lexical_text(session: Session, *, reflection_pk: int, namespace: str, kind: str, text_: str) -> None:
    """Insert or replace a reflection's lexical text and its feature keys."""
    keys = keys_blob(text_keys(text_))
    stmt = dialect_insert(session)(LexicalText).values(
        reflection_pk=reflection_pk, namespace=namespace, kind=kind, text=text_, keys=keys
    )
    session.execute(
        stmt.on_conflict_do_update(index_elements=["reflection_pk"], set_={"text": text_, "kind": kind, "keys": keys})
    )


# -- feature keys ------------------------------------------------------------


@functools.lru_cache(maxsize=65_536)
def text_keys(value: str) -> np.ndarray:
    """A text's lexical features as sorted, distinct 64-bit keys: its word tokens'
    (`word_key`) and those of each ordered pair of tokens one or two positions apart
    (`pair_keys` of the two words' keys), so "the key is 3 steps" has "key is",
    "is 3" and "key 3". The same as `feature_keys` of the feature strings, without
    building them. Cached for texts that are not stored with their keys (a
    snapshot's, a calibration's); read-only, since cached arrays are shared."""
    words = np.fromiter(map(word_key, tokens(value)), dtype=np.uint64)
    pairs = pair_keys(np.concatenate((words[:-1], words[:-2])), np.concatenate((words[1:], words[2:])))
    keys = np.concatenate((words, pairs))
    keys.sort()
    if len(keys) > 1:  # a repeated word or pair is one feature
        keys = keys[np.concatenate(([True], keys[1:] != keys[:-1]))]
    keys.setflags(write=False)
    return keys


@functools.lru_cache(maxsize=4_096)
def feature_keys(features: frozenset[str]) -> np.ndarray:
    """Feature strings as sorted 64-bit keys: a word's is its `word_key`, a pair's
    ("a b") `pair_keys` of its words' keys. Two of a million features share a key with
    odds of about 3e-8, which would only merge their weights. Read-only (cached)."""
    words = [f for f in features if " " not in f]
    pairs = [f.split(" ") for f in features if " " in f]
    firsts = np.fromiter((word_key(a) for a, _ in pairs), dtype=np.uint64, count=len(pairs))
    seconds = np.fromiter((word_key(b) for _, b in pairs), dtype=np.uint64, count=len(pairs))
    keys = np.concatenate((np.fromiter(map(word_key, words), dtype=np.uint64), pair_keys(firsts, seconds)))
    keys.sort()
    keys.setflags(write=False)
    return keys


@functools.lru_cache(maxsize=65_536)
def word_key(word: str) -> int:
    """BLAKE2b of the word, 64 bits: the same in every process, unlike hash()."""
    return int.from_bytes(hashlib.blake2b(word.encode(), digest_size=8).digest(), "little")


_PAIR_MULTIPLIER = np.uint64(0x9E3779B97F4A7C15)
_MIX_1 = np.uint64(0xFF51AFD7ED558CCD)
_MIX_2 = np.uint64(0xC4CEB9FE1A85EC53)
_SHIFT = np.uint64(33)


def pair_keys(firsts: np.ndarray, seconds: np.ndarray) -> np.ndarray:
    """The ordered pairs' keys: MurmurHash3's 64-bit finaliser (a bijection) of
    first * φ·2^64 xor second, so "a b" and "b a" differ and a pair's key is as unlike
    every word's as two words' keys are unlike each other (uint64 arithmetic wraps)."""
    x = (firsts * _PAIR_MULTIPLIER) ^ seconds
    x ^= x >> _SHIFT
    x *= _MIX_1
    x ^= x >> _SHIFT
    x *= _MIX_2
    x ^= x >> _SHIFT
    return x


def keys_blob(keys: np.ndarray) -> bytes:
    """Keys as stored: little-endian uint64, in order."""
    return keys.astype("<u8", copy=False).tobytes()


def keys_from_blob(blob: bytes) -> np.ndarray:
    """`keys_blob`'s keys back, as a read-only array over the bytes (no copy)."""
    return np.frombuffer(blob, dtype="<u8").astype(np.uint64, copy=False)


def query_words(query: str) -> list[str]:
    """The distinct words a query text is searched by (in order; no overlong ones)."""
    return list(dict.fromkeys(t for t in tokens(query) if len(t) <= MAX_TOKEN_CHARS))[:MAX_QUERY_TOKENS]


def list_term_counts(session: Session, words: Sequence[str]) -> dict[str, int]:
    """How many lexical documents (all namespaces: what an OR query over a word makes
    the engine scan) hold each word. SQLite: exact, from the fts5vocab table of
    migration 0011 (reading a word's count costs as much as its posting list, so
    callers cache it). PostgreSQL: ANALYZE's estimate from the tsvector column's most
    common elements (frequency x rows); a word not among them counts 0, as rare."""
    if not words:
        return {}
    if session.get_bind().dialect.name == "postgresql":
        row = session.execute(
            text(
                "SELECT s.most_common_elems::text::text[], s.most_common_elem_freqs, c.reltuples "
                "FROM pg_stats s JOIN pg_class c ON c.relname = s.tablename "
                "JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = s.schemaname "
                "WHERE s.schemaname = current_schema() AND s.tablename = 'lexical_texts' AND s.attname = 'tsv'"
            )
        ).first()
        common: dict[str, int] = {}
        if row is not None and row[0] is not None:
            elems, freqs, rows = row
            common = {e: round(f * max(rows, 0)) for e, f in zip(elems, freqs, strict=False)}
        return {w: common.get(w, 0) for w in words}
    marks = ", ".join(f":w{i}" for i in range(len(words)))
    found = session.execute(
        text(f"SELECT term, doc FROM lexical_fts_vocab WHERE term IN ({marks})"),
        {f"w{i}": w for i, w in enumerate(words)},
    )
    counts = {str(term): int(doc) for term, doc in found}
    return {w: counts.get(w, 0) for w in words}


def list_lexical_matches(
    session: Session,
    namespace: str,
    kinds: Sequence[str],
    query: str,
    limit: int,
    keep: Callable[[list[str]], list[str]] | None = None,
) -> list[tuple[int, float]]:
    """(reflection pk, engine score: higher is better) of the best `limit` matches of
    the query's words among the namespace's reflections of these kinds. `keep`: which
    of the words to search by (e.g. the rare ones; all by default)."""
    words = query_words(query)
    return list_word_matches(session, namespace, kinds, keep(words) if keep is not None else words, limit)


def list_word_matches(
    session: Session, namespace: str, kinds: Sequence[str], words: Sequence[str], limit: int
) -> list[tuple[int, float]]:
    """`list_lexical_matches` for words already chosen (`query_words`' tokens)."""
    if not words or not kinds:
        return []
    params: dict[str, object] = {"ns": namespace, "n": limit, **{f"k{i}": k for i, k in enumerate(kinds)}}
    postgres = session.get_bind().dialect.name == "postgresql"
    if postgres:
        params["q"] = " | ".join(f"'{w}'" for w in words)  # \w+ tokens hold no quote
    else:
        params["q"] = " OR ".join(f'"{w}"' for w in words)
    # Core rows on the session's connection: this runs on every retrieve.
    rows = session.connection().execute(_matches_statement(postgres, len(kinds)), params)
    return [(int(pk), float(score)) for pk, score in rows]


def read_generation(session: Session, namespace: str) -> int:
    """Where the lexical index stands for the namespace's searches (migration 0021):
    any write to `lexical_texts` that can change their matches moves it, in the
    writing transaction. SQLite's one counter covers every namespace (bm25 weighs by
    the whole index); PostgreSQL's is the namespace's own. A namespace never written
    since the migration reads 0, as its first write moves it to 1."""
    scope = namespace if session.get_bind().dialect.name == "postgresql" else ""
    found = session.connection().execute(_GENERATION, {"scope": scope}).scalar()
    return int(found) if found is not None else 0


_GENERATION = text("SELECT generation FROM lexical_generations WHERE scope = :scope")


@functools.cache
def _matches_statement(postgres: bool, n_kinds: int) -> TextClause:
    """`list_lexical_matches`' query for one engine and number of kinds, built once."""
    kind_list = ", ".join(f":k{i}" for i in range(n_kinds))
    if postgres:
        return text(
            "SELECT t.reflection_pk, ts_rank(t.tsv, q) AS score FROM lexical_texts t, to_tsquery('simple', :q) q "
            f"WHERE t.namespace = :ns AND t.kind IN ({kind_list}) AND t.tsv @@ q ORDER BY score DESC LIMIT :n"
        )
    # Each match's namespace and kind from the index of migration 0020 (~30 bytes an
    # entry), not from its row (~1 KB of text and keys): SQLite's planner takes a rowid's
    # own row unless told otherwise.
    return text(
        "SELECT t.reflection_pk, -bm25(lexical_fts) AS score FROM lexical_fts "
        "JOIN lexical_texts t INDEXED BY ix_lexical_texts_match ON t.reflection_pk = lexical_fts.rowid "
        f"WHERE lexical_fts MATCH :q AND t.namespace = :ns AND t.kind IN ({kind_list}) "
        "ORDER BY score DESC LIMIT :n"
    )
