"""The process's in-memory vector indexes, derived from SQL and kept caught up.

One `VectorIndex` per (namespace, kind, field). Each namespace remembers the last
`index_changes.seq` it applied (its watermark). Catching up reads the feed after
the watermark, loads the vectors of upserted reflections from the `embeddings`
table and removes deleted ones. Because feed writers hold a per-namespace lock,
seq order is commit order and nothing committed is ever skipped; so every API
process (and every replica) converges on what the workers wrote, at most one
`sync_interval` late, and at once when a request forces a sync (read-your-writes).

A first sync without a snapshot rebuilds from the embeddings table (no
re-encoding). Snapshots (`save`) make restarts cheap: load, then catch up.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from store import embeddings as embeddings_repo
from store import index_feed
from store.database import Database
from store.vectors import VectorIndex

log = logging.getLogger("reflexa.index")

FIELDS = ("state", "internal")
_FEED_PAGE = 5_000


@dataclass
class _NamespaceIndexes:
    watermark: int = -1  # -1: never loaded
    indexes: dict[tuple[str, str], VectorIndex] = field(default_factory=dict)
    last_sync: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock)


class IndexRegistry:
    def __init__(
        self,
        db: Database,
        *,
        model: str,
        dim: int,
        snapshot_dir: Path | None = None,
        sync_interval: float = 0.1,
    ) -> None:
        self.db = db
        self.model = model
        self.dim = dim
        self.snapshot_dir = snapshot_dir
        self.sync_interval = sync_interval
        self._namespaces: dict[str, _NamespaceIndexes] = {}
        self._guard = threading.Lock()

    def _ns(self, namespace: str) -> _NamespaceIndexes:
        with self._guard:
            return self._namespaces.setdefault(namespace, _NamespaceIndexes())

    def sizes(self) -> dict[tuple[str, str, str], int]:
        """(namespace, kind, field) -> live vectors, for metrics."""
        with self._guard:
            spaces = list(self._namespaces.items())
        return {(ns, k, f): len(idx) for ns, st in spaces for (k, f), idx in list(st.indexes.items())}

    def structures(self) -> dict[tuple[str, str, str], tuple[str, bool]]:
        """(namespace, kind, field) -> (structure serving searches, rebuilding now)."""
        with self._guard:
            spaces = list(self._namespaces.items())
        return {(ns, k, f): (idx.kind, idx.rebuilding) for ns, st in spaces for (k, f), idx in list(st.indexes.items())}

    def index(self, namespace: str, kind: str, field_: str) -> VectorIndex | None:
        return self._ns(namespace).indexes.get((kind, field_))

    def _index_for(self, state: _NamespaceIndexes, kind: str, field_: str) -> VectorIndex:
        idx = state.indexes.get((kind, field_))
        if idx is None:
            # Rebuilds (the switch to IVF, retraining) run beside the requests that
            # trigger them: at 1M vectors a training takes minutes.
            idx = state.indexes[(kind, field_)] = VectorIndex(self.dim, rebuild_in_background=True)
        return idx

    # -- catching up -------------------------------------------------------

    def sync(self, namespace: str, *, force: bool = False) -> int:
        """Apply the feed after the watermark; returns changes applied. Without
        `force`, does nothing if the last sync is younger than `sync_interval`."""
        state = self._ns(namespace)
        if not force and time.monotonic() - state.last_sync < self.sync_interval and state.watermark >= 0:
            return 0
        # An unforced sync never queues behind another one (a big catch-up, a first
        # load): the indexes as they are now are what it was going to serve anyway.
        if not state.lock.acquire(blocking=force or state.watermark < 0):
            return 0
        try:
            if not force and time.monotonic() - state.last_sync < self.sync_interval and state.watermark >= 0:
                return 0
            if state.watermark < 0 and not self._load_snapshot(namespace, state):
                self._rebuild(namespace, state)
            applied = self._catch_up(namespace, state)
            state.last_sync = time.monotonic()
            return applied
        finally:
            state.lock.release()

    def _catch_up(self, namespace: str, state: _NamespaceIndexes) -> int:
        applied = 0
        while True:
            with self.db.read(autocommit=True) as session:  # plain SELECTs, polled by requests
                changes = index_feed.list_changes_after(session, namespace, state.watermark, _FEED_PAGE)
                upserts = sorted({c.reflection_pk for c in changes if c.op == "upsert"})
                vectors = embeddings_repo.read_embeddings(session, upserts, self.model)
            if not changes:
                return applied
            for change in changes:
                if change.op == "delete":
                    for f in FIELDS:
                        idx = state.indexes.get((change.kind, f))
                        if idx is not None:
                            idx.remove(np.array([change.reflection_pk], dtype=np.int64))
            by_index: dict[tuple[str, str], tuple[list[int], list[np.ndarray]]] = {}
            kinds = {c.reflection_pk: c.kind for c in changes if c.op == "upsert"}
            deleted_later = {c.reflection_pk for c in changes if c.op == "delete"}
            for pk in upserts:
                if pk in deleted_later and pk not in vectors:
                    continue  # created and deleted within this page
                for f, vec in vectors.get(pk, {}).items():
                    ids, vecs = by_index.setdefault((kinds[pk], f), ([], []))
                    ids.append(pk)
                    vecs.append(vec)
            for (kind, f), (ids, vecs) in by_index.items():
                self._index_for(state, kind, f).add(np.array(ids, dtype=np.int64), np.vstack(vecs))
            state.watermark = changes[-1].seq
            applied += len(changes)
            if len(changes) < _FEED_PAGE:
                return applied

    def _rebuild(self, namespace: str, state: _NamespaceIndexes) -> None:
        """Fill from the embeddings table. The watermark is read first: anything
        that changes while we read is replayed from the feed afterwards (upserts
        are idempotent, deletes apply), so nothing is missed."""
        with self.db.read() as session:
            watermark = index_feed.read_last_change_seq(session, namespace)
            kinds = embeddings_repo.list_embedded_kinds(session, namespace, self.model)
        state.indexes = {}
        for kind, f in kinds:
            # Filled with rebuilds inline: a background build would keep the exact
            # copy and a replay log of every page alive beside the new structure
            # (peak 6 GB instead of 2.6 GB at 1M vectors). Nothing is served from
            # this namespace until the fill ends anyway.
            idx = VectorIndex(self.dim)
            after = 0
            while True:
                with self.db.read() as session:
                    page = embeddings_repo.list_embedding_page(
                        session, namespace, kind, f, self.model, after_pk=after, limit=20_000
                    )
                if not page:
                    break
                ids = np.array([r for _, r, _ in page], dtype=np.int64)
                vecs = np.vstack([np.frombuffer(b, dtype="<f4") for _, _, b in page])
                idx.add(ids, vecs)
                after = page[-1][0]
            idx.rebuild_in_background = True
            state.indexes[(kind, f)] = idx
        state.watermark = watermark

    def rebuild(self, namespace: str) -> int:
        """Drop and rebuild one namespace's indexes from SQL (`reflexa reindex`)."""
        state = self._ns(namespace)
        with state.lock:
            self._rebuild(namespace, state)
            self._catch_up(namespace, state)
            state.last_sync = time.monotonic()
            return sum(len(i) for i in state.indexes.values())

    # -- snapshots ---------------------------------------------------------

    def _snapshot_path(self, namespace: str) -> Path | None:
        if self.snapshot_dir is None:
            return None
        return self.snapshot_dir / namespace

    def save(self, namespace: str) -> None:
        """Persist the namespace's indexes and watermark (atomic per file; the
        manifest is written last, so a crash leaves the previous snapshot usable)."""
        base = self._snapshot_path(namespace)
        state = self._namespaces.get(namespace)
        if base is None or state is None or state.watermark < 0:
            return
        with state.lock:
            base.mkdir(parents=True, exist_ok=True)
            files = {}
            for (kind, f), idx in state.indexes.items():
                name = f"{kind}-{f}-{state.watermark}.faiss"
                idx.save(base / name)
                files[f"{kind}/{f}"] = name
            manifest = {"model": self.model, "dim": self.dim, "watermark": state.watermark, "files": files}
            tmp = base / "manifest.json.tmp"
            tmp.write_text(json.dumps(manifest))
            tmp.replace(base / "manifest.json")
            for old in base.glob("*.faiss"):
                if old.name not in files.values():
                    old.unlink(missing_ok=True)

    def save_all(self) -> None:
        for namespace in list(self._namespaces):
            try:
                self.save(namespace)
            except OSError as exc:  # a snapshot is an optimisation; never fail shutdown for it
                log.warning("could not save index snapshot of %s: %s", namespace, exc)

    def _load_snapshot(self, namespace: str, state: _NamespaceIndexes) -> bool:
        base = self._snapshot_path(namespace)
        if base is None or not (base / "manifest.json").exists():
            return False
        try:
            manifest = json.loads((base / "manifest.json").read_text())
            if manifest["model"] != self.model or manifest["dim"] != self.dim:
                return False
            indexes = {}
            for key, name in manifest["files"].items():
                kind, f = key.split("/")
                indexes[(kind, f)] = VectorIndex.load(base / name, rebuild_in_background=True)
        except (OSError, ValueError, KeyError, RuntimeError) as exc:
            log.warning("ignoring unusable index snapshot of %s: %s", namespace, exc)
            return False
        with self.db.read() as session:
            if index_feed.read_last_change_seq(session, namespace) < manifest["watermark"]:
                return False  # the snapshot is ahead of this database (restored backup?)
        state.indexes = indexes
        state.watermark = manifest["watermark"]
        return True
