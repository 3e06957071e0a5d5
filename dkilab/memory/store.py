"""MemoryStore: messages in SQLite (+FTS5 for BM25) with per-user FAISS indexes beside it."""
from __future__ import annotations

import json
import os
import secrets
import tempfile
import threading
from pathlib import Path
from typing import Callable, Iterable

import numpy as np
from cachetools import LRUCache

from dkilab.encoders.embedder import DEFAULT_EMBEDDER, Embedder, auto_embedder, index_text_for, language_of
from dkilab.encoders.passages import VERSION as PASSAGES_VERSION
from dkilab.encoders.passages import of as passages_of
from dkilab.memory.cursor import RESULT_SET_TTL, RESULT_SETS_PER_USER, RESULT_SETS_TOTAL, CursorCodec, ResultSets
from dkilab.memory.rows import MSG_COLS, fts_table, row_to_message, user_key
from dkilab.memory.sqlite import connect, transaction, with_retry
from dkilab.memory.vectors import VectorIndex
from dkilab.memory.view import UserMemory
from dkilab.text.segment import segment
from dkilab.types import Message

DB_FILE = "memory.sqlite"
SCHEMA_VERSION = "4"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS messages(
    rid INTEGER PRIMARY KEY,
    message_id TEXT NOT NULL,
    user_id TEXT NOT NULL,
    session_id TEXT NOT NULL,
    turn_id INTEGER NOT NULL,
    role TEXT NOT NULL,
    content TEXT NOT NULL,
    ts REAL NOT NULL,
    topic TEXT,
    speaker TEXT,
    metadata TEXT NOT NULL,
    embedding BLOB,
    fts_id INTEGER UNIQUE,
    UNIQUE(user_id, message_id)  -- ids are per user: bob never learns that alice uses an id
);
-- each user gets a slot; its FTS rowids are (slot << 32) | seq and its FTS5 table is fts_u{slot}
CREATE TABLE IF NOT EXISTS users(slot INTEGER PRIMARY KEY, user_id TEXT NOT NULL UNIQUE, next_seq INTEGER NOT NULL);
-- the passages of a message over the encoder's window (encoders/passages.py), beside its own vector
CREATE TABLE IF NOT EXISTS passages(rid INTEGER NOT NULL, idx INTEGER NOT NULL, embedding BLOB NOT NULL,
                                    PRIMARY KEY(rid, idx));
-- the same passages as BM25 documents in the user's FTS table (rowid fts_id), each scoring the message whose FTS
-- rowid is msg; their text is kept here because a contentless FTS5 row is deleted by its text (a re-cut store)
CREATE TABLE IF NOT EXISTS passage_fts(fts_id INTEGER PRIMARY KEY, msg INTEGER NOT NULL, body TEXT NOT NULL,
                                       extra TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS messages_user_ts ON messages(user_id, ts, rid);
CREATE INDEX IF NOT EXISTS messages_session_turn ON messages(user_id, session_id, turn_id, rid);
"""

# One FTS5 table per user: BM25's document frequencies are that user's own (another user's data can
# neither shift your scores nor leak through them), and bm25() no longer walks every user's postings
# to count them, which made lexical_search grow with the whole store. Columns: body = segmented
# content; extra = segmented speaker/topic/index_extra.
_FTS_DDL = ("CREATE VIRTUAL TABLE IF NOT EXISTS {table} USING fts5("
            "body, extra, content='', tokenize='porter unicode61 remove_diacritics 2')")


SLOT_BITS = 32


TURN_ORDER_USERS = 256  # users whose turn order a store keeps (MemoryStore.turn_order)
AUTO_SAMPLE = 200  # the first messages a new store opened without an embedder reads its language from

# What a message's vector is computed from. v1: the turn alone (speaker and text). v2 adds the message it
# replies to (the previous turn of its session) after its own text, so a bare reply ("Yes, we went
# yesterday!") is found with the question it answers: under hand-weighted fusion that was worth LoCoMo
# recall@10 0.660 -> 0.706, at twice the tokens to encode. Learned fusion (recall/learned.py) reads the
# previous and next turns' cosines itself, and still gained from v2 on data it was not fitted on. A new
# store's version is embedder.index_text_for's (v2), or the one asked for; a store keeps the version it was
# built with (meta `index_text`).


def index_text(msg: Message, replying_to: Message | None = None, version: str = "2") -> str:
    """Text embedded for semantic search: speaker name, content, loader-supplied extra text and (v2)
    the previous turn of the session."""
    parts = [f"{msg.speaker}: {msg.content}" if msg.speaker else msg.content]
    if msg.metadata.get("index_extra"):
        parts.append(str(msg.metadata["index_extra"]))
    if version != "1" and replying_to is not None:
        who = replying_to.speaker or replying_to.role
        parts.append(f"(replying to {who}: {replying_to.content})")
    return " ".join(parts)


def _extra_text(speaker, topic, metadata: dict) -> str:
    return " ".join(str(x) for x in (speaker, topic, metadata.get("index_extra")) if x)


def _passage_bodies(m: Message, passages: list[str]) -> list[str]:
    """A message's passages as BM25 documents: segmented as its body is, without the speaker each is led by
    (the speaker is the document's `extra`, as the message's own)."""
    lead = f"{m.speaker}: " if m.speaker else ""
    return [" ".join(segment(p[len(lead):] if p.startswith(lead) else p)) for p in passages]


def _insert_passage_docs(c, slot_seq, msg_fts_id: int, bodies: list[str], extra: str) -> int:
    """Index a message's passages in its user's FTS table, each scoring the message (`passage_fts`); returns the
    user's next FTS sequence number."""
    slot, seq = slot_seq
    for body in bodies:
        pid = (slot << SLOT_BITS) | seq
        c.execute(f"INSERT INTO {fts_table(slot)}(rowid, body, extra) VALUES(?,?,?)", (pid, body, extra))
        c.execute("INSERT INTO passage_fts(fts_id, msg, body, extra) VALUES(?,?,?,?)", (pid, msg_fts_id, body, extra))
        seq += 1
    return seq


class _TurnTaken(Exception):
    """Another writer stored the turn this one allocated (add_turn retries)."""


class MemoryStore:
    """A directory holding `memory.sqlite` and `faiss/`; `open(None)` makes a throw-away store.

    Use `store.for_user(user_id)` for queries: the returned view is bound to one user.
    """

    def __init__(self, path: str | None, embedder: Embedder | None = None, result_cap: int = 1000,
                 create: bool = False, index_text: str | None = None, passages: bool = True):
        self._tmpdir = None
        self.passages = passages  # index a message over the encoder's window as passages (encoders/passages.py)
        if index_text not in (None, "1", "2"):
            raise ValueError(
                f"index_text {index_text!r}: expected '1' (each turn alone) or '2' (with the turn it replies to)")
        self._want_index_text = index_text
        if path in (None, ":memory:"):
            self._tmpdir = tempfile.TemporaryDirectory(prefix="dkilab-store-")
            path = self._tmpdir.name
        self.path = Path(path)
        if self.path.exists() and not self.path.is_dir():
            raise ValueError(f"memory store path {self.path} exists and is not a directory")
        self.path.mkdir(parents=True, exist_ok=True)
        self.result_cap = result_cap
        self._check_is_store(create)
        self.conn = connect(str(self.path / DB_FILE))
        self._lock = threading.RLock()
        self._check_version()
        with_retry(lambda: self.conn.executescript(_SCHEMA))
        self._check_meta()
        self._init_meta()
        built_with = self._meta.get("embedder")  # a store opened without an embedder uses the one that built it
        # a new store opened without one takes what `embedder: auto` gives its first messages' language
        # (`_choose_embedder`); until then stock MiniLM answers queries (of a store with no vectors)
        self._auto = embedder is None and not built_with and "embedding_dim" not in self._meta
        self.embedder = embedder or Embedder(built_with or DEFAULT_EMBEDDER)
        if built_with and self.embedder.model_name != built_with:
            self.conn.close()
            raise ValueError(f"{self.path / DB_FILE} was built with the embedder {built_with!r}; its vectors "
                             f"cannot be searched or extended with {self.embedder.model_name!r} (open it with "
                             "that embedder, or build a new store)")
        self._check_weights()
        recorded = self._meta.get("index_text")
        if index_text and recorded and recorded != index_text:
            self.conn.close()
            raise ValueError(f"{self.path / DB_FILE} embeds index text v{recorded}; it cannot take v{index_text} "
                             "vectors (open it without index_text, or build a new store)")
        self.cursors = CursorCodec(bytes.fromhex(self._meta["cursor_secret"]))
        self._vectors = None
        # ranked lexical result sets behind live cursors: (user, cid) -> (sig, ranked); bounded per user and
        # in all, for an hour (dkilab.memory.view)
        self.result_sets = ResultSets(RESULT_SETS_PER_USER, RESULT_SETS_TOTAL, RESULT_SET_TTL)
        # each user's turn order (view.adjacent), keyed by user and checked against the user's rows; bounded

        self._turn_orders: LRUCache[str, tuple[tuple[int, int], dict]] = LRUCache(maxsize=TURN_ORDER_USERS)
        self._turn_order_lock = threading.Lock()

    @classmethod
    def open(cls, path: str | os.PathLike | None = None, embedder: Embedder | None = None, **kwargs) -> "MemoryStore":
        return cls(None if path is None else str(path), embedder=embedder, **kwargs)

    # --- metadata -------------------------------------------------------------------------
    def _check_is_store(self, create: bool) -> None:
        """A new directory becomes a store; a directory whose database is missing or 0 bytes while other
        store files remain (a deleted or truncated store) is refused unless `create=True`."""
        db = self.path / DB_FILE
        leftovers = sorted(p.name for p in self.path.iterdir()
                           if p.name.startswith(DB_FILE + "-") or (p.name == "faiss" and any(p.iterdir())))
        if create or (db.exists() and db.stat().st_size > 0):
            return
        if db.exists():
            raise ValueError(f"{db} is empty (0 bytes): the store was truncated; restore it from a backup, or open "
                             "it with create=True to start an empty store there")
        if leftovers:
            raise ValueError(f"{db} is missing but {self.path} holds a store's other files "
                             f"({', '.join(leftovers[:4])}): the store was deleted; restore it, or open it with "
                             "create=True to start an empty store")

    def _check_meta(self) -> None:
        """A store with messages must still know what it is (its id and, with vectors, its encoder)."""
        c = self.conn
        keys = {r[0] for r in c.execute("SELECT key FROM meta")}
        n = c.execute("SELECT COUNT(*) FROM messages").fetchone()[0]
        if not n:
            return
        lost = [k for k in ("schema_version", "store_id", "cursor_secret") if k not in keys]
        if c.execute("SELECT 1 FROM messages WHERE embedding IS NOT NULL LIMIT 1").fetchone():
            lost += [k for k in ("embedder", "embedding_dim") if k not in keys]
        if lost:
            c.close()
            raise ValueError(f"{self.path / DB_FILE}: its meta table lost {', '.join(lost)} while {n} messages are "
                             "stored, so which encoder made its vectors is unknown; restore the store from a backup")

    def _init_meta(self) -> None:
        def init():
            with transaction(self.conn) as c:
                c.execute("INSERT OR IGNORE INTO meta VALUES('schema_version', ?)", (SCHEMA_VERSION,))
                c.execute("INSERT OR IGNORE INTO meta VALUES('cursor_secret', ?)", (secrets.token_hex(16),))
                c.execute("INSERT OR IGNORE INTO meta VALUES('store_id', ?)", (secrets.token_hex(8),))
                if not c.execute("SELECT 1 FROM messages LIMIT 1").fetchone():  # a new store: passages from the start
                    c.execute("INSERT OR IGNORE INTO meta VALUES('passages', ?)", (PASSAGES_VERSION,))
        with_retry(init)
        self._meta = {r["key"]: r["value"] for r in self.conn.execute("SELECT key, value FROM meta")}

    def _check_version(self) -> None:
        """A store written by another schema is refused before anything in it is touched."""
        has_meta = self.conn.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name='meta'").fetchone()
        row = has_meta and self.conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        if row and row[0] != SCHEMA_VERSION:
            self.conn.close()
            raise ValueError(f"{self.path / DB_FILE}: schema version {row[0]}, expected {SCHEMA_VERSION}; "
                             "docs/migration.md says how to upgrade it (nothing was changed)")

    def _check_weights(self) -> None:
        """A store built by a local model directory records the digest of its files (`Embedder.weights`);
        reopened after the weights at that path changed, it is refused: its vectors are the old model's."""
        built, now = self._meta.get("embedder_weights"), self.embedder.weights
        if built and now and built != now:
            self.conn.close()
            raise ValueError(f"{self.path / DB_FILE} was built by the model in {self.embedder.model_name} with "
                             f"weights {built}; the files there now are {now}, so its vectors are another "
                             "model's (build a new store, or restore those weights)")

    def _check_embedder(self, dim: int) -> None:
        """Record the embedder on first use; refuse a store built with a different one."""
        name = self.embedder.model_name
        if "embedding_dim" in self._meta:  # recorded once; later batches only compare
            if self._meta.get("embedder") not in (None, name):  # MiniLM and e5-small are both 384-d
                raise ValueError(f"{self.path / DB_FILE} was built with the embedder {self._meta['embedder']!r}; "
                                 f"its vectors cannot be searched or extended with {name!r} (open it with that "
                                 "embedder, or build a new store)")
            if int(self._meta["embedding_dim"]) != dim:
                raise ValueError(
                    f"{self.path / DB_FILE} holds {self._meta['embedding_dim']}-d embeddings from "
                    f"{self._meta['embedder']!r}; the embedder {name!r} gives {dim}-d vectors")
            return

        def record():
            with transaction(self.conn) as c:
                c.execute("INSERT OR IGNORE INTO meta VALUES('embedder', ?)", (name,))
                c.execute("INSERT OR IGNORE INTO meta VALUES('embedding_dim', ?)", (str(dim),))
                if self.embedder.weights:
                    c.execute("INSERT OR IGNORE INTO meta VALUES('embedder_weights', ?)", (self.embedder.weights,))
        with_retry(record)
        self._meta = {r["key"]: r["value"] for r in self.conn.execute("SELECT key, value FROM meta")}
        if int(self._meta["embedding_dim"]) != dim:
            raise ValueError(
                f"{self.path / DB_FILE} holds {self._meta['embedding_dim']}-d embeddings from "
                f"{self._meta['embedder']!r}; the embedder {name!r} gives {dim}-d vectors"
            )

    @property
    def vectors(self):
        if self._vectors is None:
            dim = int(self._meta.get("embedding_dim") or self.embedder.dim)
            self._vectors = VectorIndex(dim, None if self._tmpdir else self.path / "faiss", self._meta["store_id"])
        return self._vectors

    # --- ingest ---------------------------------------------------------------------------
    def add_messages(self, messages: Iterable[Message], embeddings: np.ndarray | None = None,
                     batch_size: int = 512, show_progress: bool = False) -> int:
        """Ingest messages in bulk; returns how many were new. All or nothing: the whole call is
        validated first and written in one transaction, so an error leaves the store as it was.

        Message ids are per user (bob may use an id alice uses). Idempotent by (user, message_id): a
        message already stored with the same content is skipped; the same id with other content raises
        ValueError naming it, also when a concurrent writer stored it first. `embeddings` (n, dim),
        unit rows, may be given to skip the embedder (benchmarks, tests).
        """
        msgs = self._validated(messages, embeddings)
        rows = self._prepare(msgs, embeddings, batch_size, show_progress)
        return with_retry(lambda: self._insert(rows)) if rows else 0

    def _validated(self, messages: Iterable[Message], embeddings) -> list[Message]:
        msgs = list(messages)
        seen: set[tuple[str, str]] = set()
        for m in msgs:
            if not isinstance(m, Message):
                raise TypeError(f"add_messages expects dkilab.types.Message, got {type(m).__name__}")
            for name in ("message_id", "user_id", "session_id", "role", "content"):
                value = getattr(m, name)
                if not isinstance(value, str) or (name != "content" and not value):
                    raise ValueError(f"message {m.message_id!r}: {name} must be a non-empty string, got {value!r}")
                try:
                    value.encode("utf-8")
                except UnicodeEncodeError:
                    raise ValueError(f"message {m.message_id!r}: {name} is not valid text (lone surrogate)") from None
            key = (m.user_id, m.message_id)
            if key in seen:
                raise ValueError(f"message_id {m.message_id!r} appears twice in one call (user {m.user_id!r}); "
                                 "nothing was written")
            seen.add(key)
        if embeddings is not None:
            shape = getattr(embeddings, "shape", None)
            if shape is None or len(shape) != 2 or shape[0] != len(msgs):
                raise ValueError(
                    f"add_messages got {len(msgs)} messages but embeddings of shape {shape}; nothing was written")
            if not np.all(np.isfinite(embeddings)):
                raise ValueError("add_messages: embeddings contain NaN or infinity; nothing was written")
        return msgs

    def _prepare(self, msgs: list[Message], embeddings, batch_size: int, show_progress: bool,
                 taken: Callable[[Message], Exception] | None = None) -> list[tuple]:
        """Rows for the messages that are not stored yet (embedded); ValueError on a conflicting id (or
        `taken(message)`: for a turn just allocated, a stored id means another writer took the turn)."""
        existing = self._existing([(m.user_id, m.message_id) for m in msgs])
        fresh_idx = []
        for i, m in enumerate(msgs):
            old = existing.get((m.user_id, m.message_id))
            if old is not None and taken is not None:
                raise taken(m)
            if old is None:
                fresh_idx.append(i)
            elif old != m.content:
                raise self._conflict(m)
        if not fresh_idx:
            return []
        fresh = [msgs[i] for i in fresh_idx]
        if embeddings is None:
            self._choose_embedder(fresh)
            version = self._index_text_version()
            prev = self._previous_turns(msgs, fresh) if version != "1" else {}
            texts = [index_text(m, prev.get(m.message_id), version) for m in fresh]
            # the message's own text decides (the turn it replies to comes after it and may be cut)
            cut = [passages_of(self.embedder, m.speaker, m.content, index_text(m, None, "1")) if self.passages else []
                   for m in fresh]
            every = texts + [p for ps in cut for p in ps]
            vecs = np.concatenate([self.embedder.encode(every[i:i + batch_size], show_progress=show_progress)
                                   for i in range(0, len(every), batch_size)])
            ends = np.cumsum([len(texts)] + [len(ps) for ps in cut])
            parts = [vecs[a:b] for a, b in zip(ends[:-1], ends[1:])]
            vecs = vecs[:len(texts)]
        else:
            vecs = np.ascontiguousarray(np.asarray(embeddings, dtype=np.float32)[fresh_idx])
            parts, cut = [vecs[:0]] * len(fresh), [[] for _ in fresh]
        self._check_embedder(vecs.shape[1])
        rows = []
        for m, v, ps, texts in zip(fresh, vecs, parts, cut):
            extra = _extra_text(m.speaker, m.topic, m.metadata)
            rows.append((m, v.tobytes(), " ".join(segment(m.content)), " ".join(segment(extra)),
                         [p.tobytes() for p in ps], _passage_bodies(m, texts)))
        return rows

    def _choose_embedder(self, msgs: list[Message]) -> None:
        """A new store opened without an embedder gets the one experiments' `embedder: auto` gives its data,
        read from the first messages it embeds (`language_of`): MiniLM with the LoCoMo-dev adapter
        (`offline:minilm-locomo`) for English, multilingual-e5 for Chinese and mixed."""
        with self._lock:
            if not self._auto:
                return
            self._auto = False
            built = self.conn.execute("SELECT value FROM meta WHERE key = 'embedder'").fetchone()  # another writer's
            language = language_of([m.content for m in msgs[:AUTO_SAMPLE]])
            self.embedder = Embedder(built[0] if built else auto_embedder(language))

    @staticmethod
    def _conflict(m: Message) -> ValueError:
        return ValueError(f"message_id {m.message_id!r} is already stored for user {m.user_id!r} with different "
                          "content; message ids are immutable (nothing from this call was written)")

    def _index_text_version(self) -> str:
        """The store's recorded index-text version; a store embedded before versions were recorded is v1."""
        if "index_text" not in self._meta:
            version = "1" if "embedding_dim" in self._meta else (self._want_index_text
                                                                 or index_text_for(self.embedder.model_name))

            def record():
                with transaction(self.conn) as c:
                    c.execute("INSERT OR IGNORE INTO meta VALUES('index_text', ?)", (version,))
            with_retry(record)
            self._meta = {r["key"]: r["value"] for r in self.conn.execute("SELECT key, value FROM meta")}
        return self._meta["index_text"]

    def _previous_turns(self, batch: list[Message], fresh: list[Message]) -> dict[str, Message]:
        """message_id -> the turn before it in its session (from the batch, else from the store)."""
        by_session: dict[tuple[str, str], list[Message]] = {}
        for m in batch:
            by_session.setdefault((m.user_id, m.session_id), []).append(m)
        out = {}
        for m in fresh:
            earlier = [o for o in by_session[(m.user_id, m.session_id)] if o.turn_id < m.turn_id]
            best = max(earlier, key=lambda o: o.turn_id) if earlier else None
            if best is not None and best.turn_id == m.turn_id - 1:
                out[m.message_id] = best
                continue
            row = self.conn.execute(
                f"SELECT {MSG_COLS} FROM messages WHERE user_id=? AND session_id=? AND turn_id<? "
                "ORDER BY turn_id DESC, rid DESC LIMIT 1", (m.user_id, m.session_id, m.turn_id)).fetchone()
            stored = row_to_message(row) if row is not None else None
            if best is None or (stored is not None and stored.turn_id > best.turn_id):
                best = stored
            if best is not None:
                out[m.message_id] = best
        return out

    def _existing(self, keys: list[tuple[str, str]]) -> dict[tuple[str, str], str]:
        """(user_id, message_id) -> stored content, for the keys that are stored (one indexed lookup per
        user and chunk of ids)."""
        by_user: dict[str, list[str]] = {}
        for user, mid in keys:
            by_user.setdefault(user, []).append(mid)
        out = {}
        for user, ids in by_user.items():
            for i in range(0, len(ids), 500):
                chunk = ids[i:i + 500]
                marks = ",".join("?" * len(chunk))
                q = f"SELECT message_id, content FROM messages WHERE user_id=? AND message_id IN ({marks})"
                out.update({(user, r["message_id"]): r["content"] for r in self.conn.execute(q, [user, *chunk])})
        return out

    def add_turn(self, user_id: str, session_id: str, make: Callable[[int], Message]) -> Message:
        """Store `make(turn_id)` at the session's next turn id (max + 1), allocated and inserted
        atomically: concurrent threads or processes adding to one session get distinct turns."""
        for _ in range(100):
            last = self._max_turn(self.conn, user_id, session_id)
            msg = make(last + 1)
            try:
                rows = self._prepare(self._validated([msg], None), None, 1, False, taken=lambda m: _TurnTaken())
                with_retry(lambda: self._insert(rows, expect_turn=(user_id, session_id, last)))
                return msg
            except _TurnTaken:
                continue  # another writer took that turn: allocate again
        raise RuntimeError(f"could not allocate a turn in session {session_id!r} (100 concurrent attempts lost)")

    @staticmethod
    def _max_turn(c, user_id: str, session_id: str) -> int:
        return c.execute("SELECT COALESCE(MAX(turn_id), 0) FROM messages WHERE user_id=? AND session_id=?",
                         (user_id, session_id)).fetchone()[0]

    def _insert(self, rows, expect_turn: tuple[str, str, int] | None = None) -> int:
        added = 0
        seqs: dict[str, list[int]] = {}
        with self._lock, transaction(self.conn) as c:
            if expect_turn is not None and self._max_turn(c, *expect_turn[:2]) != expect_turn[2]:
                raise _TurnTaken()
            for m, emb, body, extra, cut, bodies in rows:
                if m.user_id not in seqs:
                    seqs[m.user_id] = list(self._user_slot(c, m.user_id))
                slot_seq = seqs[m.user_id]
                fts_id = (slot_seq[0] << SLOT_BITS) | slot_seq[1]
                cur = c.execute(
                    "INSERT OR IGNORE INTO messages(message_id, user_id, session_id, turn_id, role, content, ts,"
                    " topic, speaker, metadata, embedding, fts_id) VALUES(?,?,?,?,?,?,?,?,?,?,?,?)",
                    (m.message_id, m.user_id, m.session_id, m.turn_id, m.role, m.content, m.timestamp.timestamp(),
                     m.topic, m.speaker, json.dumps(m.metadata, ensure_ascii=False, default=str), emb, fts_id),
                )
                if cur.rowcount:
                    c.execute(f"INSERT INTO {fts_table(slot_seq[0])}(rowid, body, extra) VALUES(?,?,?)",
                              (fts_id, body, extra))
                    c.executemany("INSERT INTO passages(rid, idx, embedding) VALUES(?,?,?)",
                                  [(cur.lastrowid, i, p) for i, p in enumerate(cut, start=1)])
                    slot_seq[1] += 1
                    slot_seq[1] = _insert_passage_docs(c, slot_seq, fts_id, bodies, extra)
                    added += 1
                    continue
                # another writer stored (user, id) since _prepare looked: same content is a no-op,
                # other content is the documented conflict (raised inside the transaction: all rolled back)
                stored = c.execute("SELECT content FROM messages WHERE user_id=? AND message_id=?",
                                   (m.user_id, m.message_id)).fetchone()
                if stored is None or stored[0] != m.content:
                    raise self._conflict(m)
            for user_id, (slot, seq) in seqs.items():
                c.execute("UPDATE users SET next_seq=? WHERE slot=?", (seq, slot))
        return added

    @staticmethod
    def _user_slot(c, user_id: str) -> tuple[int, int]:
        row = c.execute("SELECT slot, next_seq FROM users WHERE user_id=?", (user_id,)).fetchone()
        if row is None:
            cur = c.execute("INSERT INTO users(user_id, next_seq) VALUES(?, 0)", (user_id,))
            c.execute(_FTS_DDL.format(table=fts_table(cur.lastrowid)))
            return cur.lastrowid, 0
        return row["slot"], row["next_seq"]

    def user_slot(self, user_id: str) -> int | None:
        row = self.conn.execute("SELECT slot FROM users WHERE user_id=?", (user_id,)).fetchone()
        return None if row is None else row[0]

    # --- access ---------------------------------------------------------------------------
    def for_user(self, user_id: str):
        """The query API bound to one user (seed recall-agent §3)."""

        if not isinstance(user_id, str) or not user_id:
            raise ValueError(f"user_id must be a non-empty string, got {user_id!r}")
        return UserMemory(self, user_id)

    def turn_order(self, user_id: str) -> dict[str, tuple[list[str], int]]:
        """{message id: (its session's message ids in turn order, its index)} for one user: built with one
        query, kept while the user's row count and highest rowid stay (messages are only ever appended)."""
        version = tuple(self.conn.execute("SELECT COUNT(*), COALESCE(MAX(rid), 0) FROM messages WHERE user_id=?",
                                          (user_id,)).fetchone())
        with self._turn_order_lock:
            hit = self._turn_orders.get(user_id)
            if hit is not None and hit[0] == version:
                return hit[1]
        sessions: dict[str, list[str]] = {}
        for sid, mid in self.conn.execute("SELECT session_id, message_id FROM messages WHERE user_id=? "
                                          "ORDER BY session_id, turn_id, ts, rid", (user_id,)):
            sessions.setdefault(sid, []).append(mid)
        order = {mid: (seq, i) for seq in sessions.values() for i, mid in enumerate(seq)}
        with self._turn_order_lock:
            self._turn_orders[user_id] = (version, order)
        return order

    def passage_stats(self) -> dict[str, int]:
        """How many messages were over the encoder's window (each embedded beside its passages, where before it
        was cut at the window) and how many passage vectors they have."""
        over, n = self.conn.execute("SELECT COUNT(DISTINCT rid), COUNT(*) FROM passages").fetchone()
        return {"messages": self.count(), "over_window": over, "passages": n}

    def index_passages(self, batch_size: int = 512) -> int:
        """Give every stored message over the encoder's window its passages, cut as this version cuts them (a store
        built before passages existed keeps none, one built by another version is cut again); returns how many
        messages got them. The version is recorded in the store's meta: a later call reads nothing."""
        if not self.passages or self._meta.get("passages") == PASSAGES_VERSION or "embedding_dim" not in self._meta:
            return 0
        old = {r[0] for r in self.conn.execute("SELECT DISTINCT rid FROM passages")}
        todo = []
        rows = self.conn.execute(f"SELECT {MSG_COLS}, fts_id FROM messages WHERE embedding IS NOT NULL ORDER BY rid")
        for row in rows:
            m = row_to_message(row)
            cut = passages_of(self.embedder, m.speaker, m.content, index_text(m, None, "1"))
            if cut:
                todo.append((row["rid"], cut, m, row["fts_id"]))
        flat = [p for _, cut, _, _ in todo for p in cut]
        vecs = (np.concatenate([self.embedder.encode(flat[i:i + batch_size]) for i in range(0, len(flat), batch_size)])
                if flat else np.zeros((0, 0), np.float32))

        def write():
            at = 0
            with self._lock, transaction(self.conn) as c:
                c.execute("DELETE FROM passages")
                for pid, body, extra in c.execute("SELECT fts_id, body, extra FROM passage_fts").fetchall():
                    fts = fts_table(pid >> SLOT_BITS)
                    c.execute(f"INSERT INTO {fts}({fts}, rowid, body, extra) VALUES('delete', ?, ?, ?)",
                              (pid, body, extra))
                c.execute("DELETE FROM passage_fts")
                seqs: dict[int, list[int]] = {}
                for rid, cut, m, fts_id in todo:
                    c.executemany("INSERT OR IGNORE INTO passages(rid, idx, embedding) VALUES(?,?,?)",
                                  [(rid, i, vecs[at + i - 1].tobytes()) for i in range(1, len(cut) + 1)])
                    at += len(cut)
                    if fts_id >> SLOT_BITS not in seqs:
                        seqs[fts_id >> SLOT_BITS] = list(self._user_slot(c, m.user_id))
                    slot_seq = seqs[fts_id >> SLOT_BITS]
                    extra = " ".join(segment(_extra_text(m.speaker, m.topic, m.metadata)))
                    slot_seq[1] = _insert_passage_docs(c, slot_seq, fts_id, _passage_bodies(m, cut), extra)
                for slot, seq in seqs.values():
                    c.execute("UPDATE users SET next_seq=? WHERE slot=?", (seq, slot))
                c.execute("INSERT OR REPLACE INTO meta VALUES('passages', ?)", (PASSAGES_VERSION,))
        with_retry(write)
        self._meta["passages"] = PASSAGES_VERSION
        if todo or old:  # the indexes holding those messages lack their passages: dropped, rebuilt on the next search
            rids = sorted(old | {rid for rid, *_ in todo})
            users = {r[0] for i in range(0, len(rids), 500) for r in self.conn.execute(
                f"SELECT DISTINCT user_id FROM messages WHERE rid IN ({','.join('?' * len(rids[i:i + 500]))})",
                rids[i:i + 500])}
            self.flush()
            self._vectors = None
            for user in users:
                for suffix in (".faiss", ".json"):
                    (self.path / "faiss" / f"{user_key(user)}{suffix}").unlink(missing_ok=True)
        return len(todo)

    def users(self) -> list[str]:
        return [r[0] for r in self.conn.execute("SELECT DISTINCT user_id FROM messages ORDER BY user_id")]

    def count(self) -> int:
        return self.conn.execute("SELECT COUNT(*) FROM messages").fetchone()[0]

    def flush(self) -> None:
        """Persist the FAISS indexes (the SQLite data is durable at every commit)."""
        if self._vectors is not None:
            self._vectors.flush(self.conn)

    def close(self) -> None:
        """Flush the FAISS indexes and close; SQLite is closed (and a temporary store removed) even when the
        flush fails (a full disk: the error is raised after, and the indexes rebuild on the next open)."""
        try:
            self.flush()
        finally:
            self.conn.close()
            if self._tmpdir is not None:
                self._tmpdir.cleanup()

    def __enter__(self) -> "MemoryStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"MemoryStore({str(self.path)!r}, messages={self.count()})"
