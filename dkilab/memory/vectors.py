"""Per-user FAISS indexes derived from the embeddings stored in SQLite.

SQLite is the source of truth (so two processes can append safely); each user's vectors live in
their own `IndexIDMap2(IndexFlatIP)` keyed by SQLite rowid. One index per user keeps every search
proportional to that user's history rather than to the whole store, and makes cross-user results
impossible by construction. Indexes are caught up from SQLite before each search (rows with a
higher rowid than the index holds) and persisted under `<store>/faiss/` on flush.
"""
from __future__ import annotations

import os
import sqlite3
import threading
from pathlib import Path

import numpy as np


class VectorIndex:
    def __init__(self, dim: int, directory: Path | None):
        import faiss

        self._faiss = faiss
        self.dim = dim
        self.directory = directory
        self._indexes: dict[str, object] = {}
        self._max_rid: dict[str, int] = {}
        self._dirty: set[str] = set()
        self._lock = threading.Lock()

    def _path(self, ukey: str) -> Path | None:
        return self.directory / f"{ukey}.faiss" if self.directory else None

    def _load(self, ukey: str):
        faiss = self._faiss
        path = self._path(ukey)
        if path is not None and path.exists():
            index = faiss.read_index(str(path))
            ids = faiss.vector_to_array(index.id_map)
            self._max_rid[ukey] = int(ids.max()) if len(ids) else 0
        else:
            index = faiss.IndexIDMap2(faiss.IndexFlatIP(self.dim))
            self._max_rid[ukey] = 0
        self._indexes[ukey] = index
        return index

    def index_for(self, conn: sqlite3.Connection, user_id: str, ukey: str):
        """The user's index, caught up with every embedding committed to SQLite."""
        with self._lock:
            index = self._indexes.get(ukey) or self._load(ukey)
            rows = conn.execute(
                "SELECT rid, embedding FROM messages WHERE user_id=? AND rid>? AND embedding IS NOT NULL ORDER BY rid",
                (user_id, self._max_rid[ukey]),
            ).fetchall()
            if rows:
                vecs = np.frombuffer(b"".join(r["embedding"] for r in rows), dtype=np.float32).reshape(len(rows), self.dim)
                index.add_with_ids(vecs, np.fromiter((r["rid"] for r in rows), dtype=np.int64, count=len(rows)))
                self._max_rid[ukey] = rows[-1]["rid"]
                self._dirty.add(ukey)
            return index

    def search(self, index, query: np.ndarray, k: int, allowed: np.ndarray | None = None):
        """(scores, rowids) of the k nearest vectors, restricted to `allowed` rowids when given."""
        faiss = self._faiss
        params = None
        if allowed is not None:
            if len(allowed) == 0:
                return np.zeros(0, np.float32), np.zeros(0, np.int64)
            params = faiss.SearchParameters(sel=faiss.IDSelectorBatch(allowed.astype(np.int64)))
        k = min(k, index.ntotal)
        if k <= 0:
            return np.zeros(0, np.float32), np.zeros(0, np.int64)
        scores, ids = index.search(query.reshape(1, -1).astype(np.float32), k, params=params)
        keep = ids[0] >= 0
        return scores[0][keep], ids[0][keep]

    def flush(self) -> None:
        """Write every changed index atomically (tmp file + rename) beside the database."""
        if self.directory is None:
            return
        with self._lock:
            self.directory.mkdir(parents=True, exist_ok=True)
            for ukey in sorted(self._dirty):
                path = self._path(ukey)
                tmp = path.with_suffix(f".tmp{os.getpid()}")
                self._faiss.write_index(self._indexes[ukey], str(tmp))
                os.replace(tmp, path)
            self._dirty.clear()
