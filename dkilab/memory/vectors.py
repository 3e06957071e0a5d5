"""Per-user FAISS indexes derived from the embeddings stored in SQLite.

SQLite is the source of truth (so two processes can append safely); each user's vectors live in
their own `IndexIDMap2(IndexFlatIP)` keyed by SQLite rowid. One index per user keeps every search
proportional to that user's history rather than to the whole store, and makes cross-user results
impossible by construction. Indexes are caught up from SQLite before each search (rows with a
higher rowid than the index holds) and persisted under `<store>/faiss/` on flush.

A persisted index is a cache: beside `{user}.faiss` a `{user}.json` records the store id, the vector
count, the highest rowid covered and the file's sha256. An index that fails to read, belongs to
another store (a recreated database), disagrees with SQLite (a restored or edited database) or whose
bytes changed is rebuilt from the embeddings in SQLite, with a warning.
"""
from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import threading
import warnings
from pathlib import Path
from typing import Any

import numpy as np

PASSAGE_SHIFT = 40  # a passage's vector id: (its index << PASSAGE_SHIFT) | its message's rowid
RID_MASK = (1 << PASSAGE_SHIFT) - 1


def passage_ids(conn: sqlite3.Connection, rids: np.ndarray) -> np.ndarray:
    """The vector ids of the messages `rids` and of their passages (a filtered search must allow both)."""
    extra = []
    for i in range(0, len(rids), 500):
        part = [int(r) for r in rids[i:i + 500]]
        extra += [(idx << PASSAGE_SHIFT) | rid for rid, idx in conn.execute(
            f"SELECT rid, idx FROM passages WHERE rid IN ({','.join('?' * len(part))})", part)]
    return np.concatenate([rids.astype(np.int64), np.array(extra, dtype=np.int64)]) if extra else rids


class VectorIndex:
    def __init__(self, dim: int, directory: Path | None, store_id: str = ""):
        import faiss

        self._faiss = faiss
        self.dim = dim
        self.directory = directory
        self._indexes: dict[str, Any] = {}  # faiss indexes
        self._max_rid: dict[str, int] = {}
        self._dirty: set[str] = set()
        self._lock = threading.Lock()
        self.store_id = store_id
        self._users: dict[str, str] = {}  # user key -> user id
        self._own: dict[int, tuple[int, int]] = {}  # id(index) -> (its vector count, how many are messages' own)
        self.rebuilt: list[tuple[str, str]] = []  # (user key, why) of every index rebuilt from SQLite

    def _path(self, ukey: str) -> Path | None:
        return self.directory / f"{ukey}.faiss" if self.directory else None

    def _load(self, conn: sqlite3.Connection, user_id: str, ukey: str):
        faiss = self._faiss
        path = self._path(ukey)
        index, why = None, None
        if path is not None and path.exists():
            try:
                index, self._max_rid[ukey] = self._read_checked(conn, user_id, path)
            except Exception as exc:  # any failure: the index is a cache, SQLite has everything
                why = str(exc) or type(exc).__name__
                warnings.warn(f"FAISS index {path} is unusable ({why}); rebuilding it from SQLite", RuntimeWarning,
                              stacklevel=3)
                self.rebuilt.append((ukey, why))
        if index is None:
            index = faiss.IndexIDMap2(faiss.IndexFlatIP(self.dim))
            self._max_rid[ukey] = 0
            if why is not None:
                self._dirty.add(ukey)
        self._indexes[ukey] = index
        return index

    def _read_checked(self, conn: sqlite3.Connection, user_id: str, path: Path):
        """(index, max rowid) of a persisted index that matches its record and SQLite; raises otherwise."""
        meta_path = path.with_suffix(".json")
        if not meta_path.exists():
            raise ValueError("no record of what it covers")
        meta = json.loads(meta_path.read_text())
        data = path.read_bytes()
        if hashlib.sha256(data).hexdigest() != meta.get("sha256"):
            raise ValueError("its bytes changed since it was written")
        if meta.get("store_id") != self.store_id:
            raise ValueError("it was built for another store (the database was recreated)")
        index = self._faiss.deserialize_index(np.frombuffer(data, dtype=np.uint8))
        if index.d != self.dim or index.ntotal != meta.get("ntotal"):
            raise ValueError(f"it holds {index.ntotal} {index.d}-d vectors, its record says {meta.get('ntotal')}")
        count, top, rows_sha = self._rows_digest(conn, user_id, int(meta.get("max_rid", 0)))
        if count != index.ntotal or top != meta.get("max_rid") or rows_sha != meta.get("rows_sha256"):
            raise ValueError(f"it covers {index.ntotal} vectors up to row {meta.get('max_rid')}, SQLite holds {count} "
                             f"up to row {top}" + (" with other rows" if count == index.ntotal else "")
                             + " (a restored or edited database)")
        return index, int(meta["max_rid"])

    @staticmethod
    def _rows_digest(conn: sqlite3.Connection, user_id: str, max_rid: int) -> tuple[int, int, str]:
        """(count, max rowid, sha256 over rowids and message ids) of the user's rows up to `max_rid`: a
        reused rowid (restored or edited database) changes it, without reading the embeddings (which
        would cost as much as rebuilding the index)."""
        h, count, top = hashlib.sha256(), 0, 0
        for rid, mid in conn.execute("SELECT rid, message_id FROM messages WHERE user_id=? AND rid<=? AND embedding "
                                     "IS NOT NULL ORDER BY rid", (user_id, max_rid)):
            h.update(rid.to_bytes(8, "little"))
            h.update(mid.encode() + b"\0")
            count, top = count + 1, rid
        for rid, idx in conn.execute("SELECT p.rid, p.idx FROM passages p JOIN messages m ON m.rid = p.rid WHERE "
                                     "m.user_id=? AND p.rid<=? ORDER BY p.rid, p.idx", (user_id, max_rid)):
            h.update(b"p" + rid.to_bytes(8, "little") + idx.to_bytes(4, "little"))  # none: the digest as before
            count += 1
        return count, top, h.hexdigest()

    def index_for(self, conn: sqlite3.Connection, user_id: str, ukey: str):
        """The user's index, caught up with every embedding committed to SQLite."""
        with self._lock:
            self._users[ukey] = user_id
            index = self._indexes.get(ukey) or self._load(conn, user_id, ukey)
            rows = conn.execute(
                "SELECT rid, embedding FROM messages WHERE user_id=? AND rid>? AND embedding IS NOT NULL ORDER BY rid",
                (user_id, self._max_rid[ukey]),
            ).fetchall()
            if rows:
                cut = conn.execute("SELECT p.rid, p.idx, p.embedding FROM passages p JOIN messages m ON m.rid = p.rid "
                                   "WHERE m.user_id=? AND p.rid>? ORDER BY p.rid, p.idx",
                                   (user_id, self._max_rid[ukey])).fetchall()
                ids = [r["rid"] for r in rows] + [(r["idx"] << PASSAGE_SHIFT) | r["rid"] for r in cut]
                blob = b"".join(r["embedding"] for r in rows) + b"".join(r["embedding"] for r in cut)
                vecs = np.frombuffer(blob, dtype=np.float32).reshape(len(ids), self.dim)
                index.add_with_ids(vecs, np.array(ids, dtype=np.int64))
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
        own = self.messages(index)
        want = min(k, own)
        if want <= 0:
            return np.zeros(0, np.float32), np.zeros(0, np.int64)
        # the passages' vectors are in the index too: ask for enough that k messages come back
        cut = index.ntotal - own
        k = min(index.ntotal, want + cut)
        # one OpenMP thread for the search, restored after: a user's flat index is small (6k vectors: well
        # under a millisecond), and OpenMP workers spinning after it took the cores from the encoder and SQLite.
        # The setting is the calling thread's; left at 1 it would also have made torch (the same OpenMP) run
        # generation on one thread.
        before = faiss.omp_get_max_threads()
        faiss.omp_set_num_threads(1)
        try:
            scores, ids = index.search(query.reshape(1, -1).astype(np.float32), k, params=params)
        finally:
            faiss.omp_set_num_threads(before)
        keep = ids[0] >= 0
        scores, ids = scores[0][keep], ids[0][keep] & RID_MASK
        if cut:  # a message's best passage stands for it, its other hits go
            _, first = np.unique(ids, return_index=True)
            first = np.sort(first)[:want]
            scores, ids = scores[first], ids[first]
        return scores, ids

    def messages(self, index) -> int:
        """How many of an index's vectors are messages' own (the rest are passages), counted once per index."""
        n = self._own.get(id(index))
        if n is None or n[0] != index.ntotal:
            ids = self._faiss.vector_to_array(index.id_map) if index.ntotal else np.zeros(0, np.int64)
            n = self._own[id(index)] = (index.ntotal, int((ids <= RID_MASK).sum()))
        return n[1]

    def flush(self, conn: sqlite3.Connection | None = None) -> None:
        """Write every changed index atomically (tmp file + rename) beside the database."""
        if self.directory is None:
            return
        with self._lock:
            self.directory.mkdir(parents=True, exist_ok=True)
            for ukey in sorted(self._dirty):
                path = self.directory / f"{ukey}.faiss"
                index = self._indexes[ukey]
                data = self._faiss.serialize_index(index).tobytes()
                meta = {"store_id": self.store_id, "ntotal": int(index.ntotal), "max_rid": int(self._max_rid[ukey]),
                        "sha256": hashlib.sha256(data).hexdigest(),
                        "rows_sha256": self._rows_digest(conn, self._users[ukey], self._max_rid[ukey])[2] if conn
                        else None}
                tmp, tmp_meta = path.with_suffix(f".tmp{os.getpid()}"), path.with_suffix(f".jtmp{os.getpid()}")
                try:
                    tmp.write_bytes(data)
                    tmp_meta.write_text(json.dumps(meta))
                    os.replace(tmp, path)  # a crash between the two renames leaves a mismatch: rebuilt on load
                    os.replace(tmp_meta, path.with_suffix(".json"))
                except BaseException:  # a full disk: no half-written temp file left behind (the index rebuilds)
                    tmp.unlink(missing_ok=True)
                    tmp_meta.unlink(missing_ok=True)
                    raise
            self._dirty.clear()
