"""UserMemory: the recall-agent query API (seed recall-agent §3), bound to one user.

No method takes a user id; every SQL statement and FAISS index is scoped to the bound user.
"""
from __future__ import annotations

import math
import re
import secrets
from datetime import datetime
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from dkilab.config import describe_errors
from dkilab.memory.cursor import RESULT_SETS_PER_USER, query_signature
from dkilab.memory.rows import MSG_COLS, fts_table, row_to_message, user_key
from dkilab.memory.vectors import passage_ids
from dkilab.text.lang import has_cjk
from dkilab.text.segment import content_tokens, segment
from dkilab.types import Hit, Message, Page, to_utc

_PHRASE = re.compile(r'"([^"]*)"|“([^”]*)”|「([^」]*)」')
MAX_QUERY_CHARS = 4000  # longer query text is refused (a 1 MB query took 15 s)


class MessageNotFoundError(KeyError):
    """Raised for a message id this user's memory does not hold."""

    def __init__(self, message_id: str):
        super().__init__(message_id)
        self.message_id = message_id

    def __str__(self) -> str:
        return f"no message with id {self.message_id!r} in this user's memory"


class TimeRange(BaseModel):
    model_config = ConfigDict(extra="forbid")
    since: datetime | None = None
    until: datetime | None = None


METADATA_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")


class QueryFilter(BaseModel):
    """`filter` of lexical_search / semantic_search: {role, session_id, time_range: {since, until},
    metadata: {key: value or [values]}}. `metadata` keeps messages whose metadata has, for every key,
    that value (or one of the values); e.g. the session flow's routed retrieval over a knowledge base
    `{"domain": ["system"], "object": "押品"}` (seed session-l1-l2-memory §5.1)."""

    model_config = ConfigDict(extra="forbid")
    role: str | None = Field(None, min_length=1)  # "" is not "any role": it is refused (None is)
    session_id: str | None = Field(None, min_length=1)
    time_range: TimeRange | None = None
    metadata: dict[str, str | int | list[str | int]] | None = None

    @field_validator("metadata")
    @classmethod
    def _metadata_keys(cls, v):
        for key, value in (v or {}).items():
            if not METADATA_KEY.match(key):
                raise ValueError(f"metadata key {key!r} must be an identifier (letters, digits, _)")
            if isinstance(value, list) and not value:
                raise ValueError(f"metadata key {key!r}: an empty list matches nothing; leave the key out")
        return v or None


def check_text(name: str, value, max_chars: int = MAX_QUERY_CHARS) -> str:
    """A query string: TypeError if it is not text, ValueError if it is not valid text or too long."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a string, got {type(value).__name__}")
    if len(value) > max_chars:
        raise ValueError(f"{name} has {len(value)} characters; at most {max_chars} are searched")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"{name} is not valid text (it holds a lone surrogate)") from None
    return value


def _time_range(since, until) -> TimeRange:
    try:
        return TimeRange(since=since, until=until)
    except ValidationError as exc:
        raise ValueError(f"invalid time range: {describe_errors(exc)} (give datetimes or ISO 8601 text)") from None


def _parse_filter(filter) -> QueryFilter:
    if filter is None:
        return QueryFilter()
    if isinstance(filter, QueryFilter):
        return filter
    try:
        return QueryFilter.model_validate(filter)
    except ValidationError as exc:
        raise ValueError(f"invalid filter: {describe_errors(exc, 'filter')}") from None


def _check_range(name: str, value: int, lo: int, hi: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
        raise ValueError(f"{name} must be an integer between {lo} and {hi}, got {value!r}")
    return value


def _fts_quote(tokens: list[str]) -> str:
    return '"' + " ".join(t.replace('"', '""') for t in tokens) + '"'


def _epoch(ts) -> float | None:
    return None if ts is None else to_utc(ts).timestamp()


class UserMemory:
    def __init__(self, store, user_id: str):
        self._store = store
        self._user_id = user_id
        self._ukey = user_key(user_id)
        self._slot: int | None = None

    @property
    def user_id(self) -> str:
        return self._user_id

    @property
    def source(self) -> str:
        """The store's directory and the open store object (a temporary directory's name may come back)."""
        return f"{self._store.path}#{id(self._store)}"

    @property
    def encoder_name(self) -> str:
        """The name of the store's sentence encoder (learned fusion picks its model part by it)."""
        return self._store.embedder.model_name

    @property
    def embedder(self):
        """The store's encoder (shared by every user of the store; it holds no user data but its query
        cache, keyed by text)."""
        return self._store.embedder

    # --- helpers ---------------------------------------------------------------------------
    def _filter_sql(self, f: QueryFilter, alias: str = "") -> tuple[str, list]:
        a = f"{alias}." if alias else ""
        sql: list[str] = [f"{a}user_id=?"]
        args: list[Any] = [self._user_id]
        if f.role:
            sql.append(f"{a}role=?"); args.append(f.role)
        if f.session_id:
            sql.append(f"{a}session_id=?"); args.append(f.session_id)
        if f.time_range and f.time_range.since:
            sql.append(f"{a}ts>=?"); args.append(_epoch(f.time_range.since))
        if f.time_range and f.time_range.until:
            sql.append(f"{a}ts<?"); args.append(_epoch(f.time_range.until))
        for key, value in (f.metadata or {}).items():  # keys are identifiers (validated): the path is safe
            values = value if isinstance(value, list) else [value]
            sql.append(f"json_extract({a}metadata, '$.{key}') IN ({','.join('?' * len(values))})")
            args.extend(values)
        return " AND ".join(sql), args

    def _rows_by_rid(self, rids: list[int]) -> dict[int, Message]:
        out = {}
        for i in range(0, len(rids), 500):
            chunk = [int(r) for r in rids[i:i + 500]]
            q = f"SELECT {MSG_COLS} FROM messages WHERE +user_id=? AND rid IN ({','.join('?' * len(chunk))})"
            out.update({r["rid"]: row_to_message(r) for r in self._store.conn.execute(q, [self._user_id, *chunk])})
        return out

    def _row(self, message_id: str):
        check_text("message_id", message_id, 1000)
        row = self._store.conn.execute(
            f"SELECT {MSG_COLS} FROM messages WHERE message_id=? AND user_id=?", (message_id, self._user_id)).fetchone()
        if row is None:
            raise MessageNotFoundError(message_id)
        return row

    # --- the four query tools + get ---------------------------------------------------------
    def get(self, message_id: str) -> Message:
        return row_to_message(self._row(message_id))

    def messages_list(self, since=None, until=None, role: str | None = None, page_size: int = 50,
                      cursor: str | None = None) -> Page:
        """Messages in time order (since inclusive, until exclusive); keyset-paged over a snapshot."""
        _check_range("page_size", page_size, 1, 1000)
        f = _parse_filter({"role": role, "time_range": _time_range(since, until)})
        sig = query_signature("messages_list", self._user_id, f.model_dump(mode="json"))
        conn = self._store.conn
        if cursor is None:
            snap = conn.execute("SELECT COALESCE(MAX(rid), 0) FROM messages").fetchone()[0]
            after = None
        else:
            state = self._store.cursors.decode(cursor, sig)
            snap, after = state["snap"], (state["ts"], state["rid"])
        where, args = self._filter_sql(f)
        where += " AND rid<=?"; args.append(snap)
        if after:
            where += " AND (ts>? OR (ts=? AND rid>?))"; args += [after[0], after[0], after[1]]
        rows = conn.execute(f"SELECT {MSG_COLS} FROM messages WHERE {where} ORDER BY ts, rid LIMIT ?",
                            [*args, page_size + 1]).fetchall()
        nxt = None
        if len(rows) > page_size:
            rows = rows[:page_size]
            nxt = self._store.cursors.encode(sig, {"snap": snap, "ts": rows[-1]["ts"], "rid": rows[-1]["rid"]})
        return Page([Hit(row_to_message(r)) for r in rows], nxt)

    def lexical_search(self, query_text: str, filter=None, page_size: int = 20, cursor: str | None = None) -> Page:
        """BM25 over FTS5. `"quoted phrases"` must match as phrases; other words are OR-ed.

        Everything in `query_text` is turned into quoted FTS strings, so FTS syntax in user text is
        matched literally, never executed. A result set (up to the store's `result_cap` hits) is
        ranked once and paged from a snapshot, so pages stay stable while messages arrive.
        """
        _check_range("page_size", page_size, 1, 200)
        f = _parse_filter(filter)
        if not check_text("query_text", query_text).strip():
            return Page([], None)
        sig = query_signature("lexical_search", self._user_id, query_text, f.model_dump(mode="json"))
        if cursor is not None:
            state = self._store.cursors.decode(cursor, sig)
            ranked = self._load_result_set(state["cid"], sig)
            return self._page(ranked, state["o"], page_size, sig, state["cid"])
        ranked = self._rank(query_text, f)
        return self._page(ranked, 0, page_size, sig, None)

    def _rank(self, query_text: str, f: QueryFilter) -> list[tuple[int, float]]:
        """[(fts_id, score)] best first, from this user's own FTS table."""
        phrases = [next(g for g in m.groups() if g is not None) for m in _PHRASE.finditer(query_text)]
        phrases = [p for p in phrases if segment(p)]
        words = list(dict.fromkeys(content_tokens(_PHRASE.sub(" ", query_text))))
        if self._slot is None:
            self._slot = self._store.user_slot(self._user_id)
        slot = self._slot
        if slot is None or (not phrases and not words):
            return []
        required = [_fts_quote(segment(p)) for p in phrases]
        optional = [*required, *(_fts_quote([w]) for w in words)]
        match = " AND ".join([*required, "(" + " OR ".join(optional) + ")"])
        fts, cap = fts_table(slot), self._store.result_cap
        # a message over the encoder's window is also indexed as its passages (memory/store.py passage_fts): it
        # scores as the best of its own document and its passages'
        msg = f"COALESCE((SELECT pf.msg FROM passage_fts pf WHERE pf.fts_id = {fts}.rowid), {fts}.rowid)"
        if f == QueryFilter():
            rows = self._store.conn.execute(
                f"SELECT {msg} AS id, bm25({fts}, 1.0, 0.6) AS s FROM {fts} WHERE {fts} MATCH ? ORDER BY s LIMIT ?",
                (match, cap)).fetchall()
        else:
            where, args = self._filter_sql(f, "m")
            rows = self._store.conn.execute(
                f"SELECT m.fts_id AS id, bm25({fts}, 1.0, 0.6) AS s FROM {fts} "
                f"JOIN messages m ON m.fts_id = {msg} WHERE {fts} MATCH ? AND {where} ORDER BY s LIMIT ?",
                [match, *args, cap]).fetchall()
        best: dict[int, float] = {}
        for r in rows:  # best first: a message's first row is its best
            best.setdefault(r["id"], -float(r["s"]))
        ranked = list(best.items())
        if not ranked and any(has_cjk(p) for p in phrases):
            ranked = self._substring_fallback(phrases, f)
        return ranked

    def _substring_fallback(self, phrases, f: QueryFilter) -> list[tuple[int, float]]:
        # jieba can cut a phrase differently inside a sentence than alone: match the raw text instead
        where, args = self._filter_sql(f, "m")
        like = " AND ".join("m.content LIKE ? ESCAPE '\\'" for _ in phrases)
        pats = ["%" + p.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%" for p in phrases]
        rows = self._store.conn.execute(
            f"SELECT m.fts_id AS id FROM messages m WHERE {where} AND {like} ORDER BY m.ts DESC, m.rid DESC LIMIT ?",
            [*args, *pats, self._store.result_cap]).fetchall()
        return [(r["id"], 0.0) for r in rows]

    def _page(self, ranked, offset: int, page_size: int, sig: str, cid: str | None) -> Page:
        chunk = ranked[offset:offset + page_size]
        ids = [int(i) for i, _ in chunk]
        rows = self._store.conn.execute(
            f"SELECT {MSG_COLS}, fts_id FROM messages WHERE +user_id=? AND fts_id IN ({','.join('?' * len(ids))})",
            [self._user_id, *ids]).fetchall() if ids else []
        msgs = {r["fts_id"]: row_to_message(r) for r in rows}
        items = [Hit(msgs[i], score) for i, score in zip(ids, (s for _, s in chunk)) if i in msgs]
        nxt = None
        if offset + page_size < len(ranked):
            cid = cid or self._save_result_set(ranked, sig)
            nxt = self._store.cursors.encode(sig, {"cid": cid, "o": offset + page_size})
        return Page(items, nxt)

    def _save_result_set(self, ranked, sig: str) -> str:
        """Keep a ranked result set behind a cursor (`MemoryStore.result_sets`: at most RESULT_SETS_PER_USER
        per user, RESULT_SETS_TOTAL per store object, for an hour)."""
        cid = secrets.token_hex(8)
        self._store.result_sets.put(self._user_id, cid, (sig, ranked))
        return cid

    def _load_result_set(self, cid: str, sig: str):
        entry = self._store.result_sets.get(self._user_id, cid)
        if entry is None or entry[0] != sig:
            raise ValueError(f"cursor has expired: a user's ranked result sets are kept for an hour, the latest "
                             f"{RESULT_SETS_PER_USER} of them, in the process that made them; start again without a "
                             "cursor")
        return entry[1]

    def semantic_search(self, query_text: str | None = None, query_embedding=None, filter=None,
                        top_k: int = 10, min_score: float | None = None) -> Page:
        """Cosine-similarity search over this user's FAISS index (scores in [-1, 1])."""
        _check_range("top_k", top_k, 1, 1000)
        f = _parse_filter(filter)
        if (query_text is None) == (query_embedding is None):
            raise ValueError("semantic_search needs exactly one of query_text or query_embedding")
        if min_score is not None and (isinstance(min_score, bool) or not isinstance(min_score, (int, float))
                                      or not math.isfinite(min_score)):
            raise ValueError(f"min_score must be a number (cosine similarity, -1..1), got {min_score!r}")
        store = self._store
        if query_embedding is None:
            if not check_text("query_text", query_text).strip():
                return Page([], None)
            query = store.embedder.encode_query(query_text)
        else:
            query = self._query_vector(query_embedding, store.vectors.dim)
        index = store.vectors.index_for(store.conn, self._user_id, self._ukey)
        allowed = None
        if f != QueryFilter():
            where, args = self._filter_sql(f)
            allowed = passage_ids(store.conn, np.array(
                [r[0] for r in store.conn.execute(f"SELECT rid FROM messages WHERE {where}", args)], dtype=np.int64))
        scores, rids = store.vectors.search(index, query, top_k, allowed)
        msgs = self._rows_by_rid(rids.tolist())
        items = [Hit(msgs[int(r)], float(s)) for s, r in zip(scores, rids)
                 if int(r) in msgs and (min_score is None or s >= min_score)]
        return Page(items, None)

    def similarities(self, query_embedding, message_ids: list[str]) -> dict[str, float]:
        """The cosine of a unit query vector with the stored vector (the best of its passages' and its own for a
        message over the encoder's window) of each of this user's `message_ids`
        (ids the user does not have, or stored without a vector, are left out): learned fusion reads the
        cosines of candidates that no vector search returned."""
        query = self._query_vector(query_embedding, self._store.vectors.dim)
        out: dict[str, float] = {}
        ids = list(dict.fromkeys(message_ids))
        for i in range(0, len(ids), 500):  # SQLite's bound-parameter limit
            part = ids[i:i + 500]
            rows = self._store.conn.execute(
                f"SELECT message_id, embedding FROM messages WHERE user_id=? AND embedding IS NOT NULL AND message_id "
                f"IN ({','.join('?' * len(part))})", [self._user_id, *part]).fetchall()
            if rows:
                vecs = np.frombuffer(b"".join(r["embedding"] for r in rows), dtype=np.float32).reshape(len(rows), -1)
                out.update(zip((r["message_id"] for r in rows), (vecs @ query).tolist()))
            cut = self._store.conn.execute(  # a message over the encoder's window: its best passage
                f"SELECT m.message_id, p.embedding FROM passages p JOIN messages m ON m.rid = p.rid WHERE m.user_id=? "
                f"AND m.message_id IN ({','.join('?' * len(part))})", [self._user_id, *part]).fetchall()
            if cut:
                vecs = np.frombuffer(b"".join(r["embedding"] for r in cut), dtype=np.float32).reshape(len(cut), -1)
                for r, score in zip(cut, (vecs @ query).tolist()):
                    out[r["message_id"]] = max(out.get(r["message_id"], score), score)
        return out

    @staticmethod
    def _query_vector(query_embedding, dim: int) -> np.ndarray:
        """A (dim,) or (1, dim) finite unit vector, else ValueError naming what is wrong."""
        try:
            arr = np.asarray(query_embedding, dtype=np.float32)
        except (TypeError, ValueError):
            raise ValueError("query_embedding must be a vector of numbers") from None
        if arr.ndim == 2 and arr.shape[0] == 1:
            arr = arr[0]
        if arr.ndim != 1 or arr.shape[0] != dim:
            raise ValueError(f"query_embedding has shape {tuple(arr.shape)}; the store holds ({dim},) vectors")
        if not np.all(np.isfinite(arr)):
            raise ValueError("query_embedding contains NaN or infinity")
        norm = float(np.linalg.norm(arr))
        if abs(norm - 1.0) > 1e-3:
            raise ValueError(f"query_embedding must be unit length (scores are cosines), its norm is {norm:.4g}; "
                             "normalise it")
        return arr

    def neighbors(self, message_id: str, before: int = 5, after: int = 5) -> list[Message]:
        """The anchor message with up to `before`/`after` messages around it in the same session."""
        _check_range("before", before, 0, 1000)
        _check_range("after", after, 0, 1000)
        a = self._row(message_id)
        key = (a["turn_id"], a["ts"], a["rid"])
        base = f"SELECT {MSG_COLS} FROM messages WHERE user_id=? AND session_id=? AND "
        prev = self._store.conn.execute(
            base + "(turn_id, ts, rid) < (?,?,?) ORDER BY turn_id DESC, ts DESC, rid DESC LIMIT ?",
            (self._user_id, a["session_id"], *key, before)).fetchall()
        nxt = self._store.conn.execute(
            base + "(turn_id, ts, rid) > (?,?,?) ORDER BY turn_id, ts, rid LIMIT ?",
            (self._user_id, a["session_id"], *key, after)).fetchall()
        return [row_to_message(r) for r in [*reversed(prev), a, *nxt]]

    # --- conveniences for recall and strategies ---------------------------------------------
    def adjacent(self, message_ids: list[str], reach: int = 1) -> dict[str, tuple[str | None, ...]]:
        """{message id: (ids of the `reach` turns before it, nearest first, then of the `reach` turns after it,
        nearest first)} within its session in turn order (None past a session's edge), for each of this
        user's `message_ids` (learned fusion reads the turns around ~100 candidates per question, where
        `neighbors` would be a query each). The store keeps each user's turn order, rebuilt when the user's
        messages change."""
        _check_range("reach", reach, 1, 5)
        order = self._store.turn_order(self._user_id)
        out: dict[str, tuple[str | None, ...]] = {}
        for mid in message_ids:
            at = order.get(mid)
            if at is not None:
                seq, i = at
                out[mid] = (*(seq[i - k] if i - k >= 0 else None for k in range(1, reach + 1)),
                            *(seq[i + k] if i + k < len(seq) else None for k in range(1, reach + 1)))
        return out

    def session_messages(self, session_id: str) -> list[Message]:
        """Every message of one session in turn order."""
        rows = self._store.conn.execute(
            f"SELECT {MSG_COLS} FROM messages WHERE user_id=? AND session_id=? ORDER BY turn_id, ts, rid",
            (self._user_id, session_id)).fetchall()
        return [row_to_message(r) for r in rows]

    def recent(self, n: int, session_id: str | None = None) -> list[Message]:
        """The latest `n` messages (of one session if given), oldest first."""
        _check_range("n", n, 0, 1_000_000)
        where, args = self._filter_sql(QueryFilter(session_id=session_id))
        rows = self._store.conn.execute(
            f"SELECT {MSG_COLS} FROM messages WHERE {where} ORDER BY ts DESC, turn_id DESC, rid DESC LIMIT ?",
            [*args, n]).fetchall()
        return [row_to_message(r) for r in reversed(rows)]

    def count(self) -> int:
        return self._store.conn.execute("SELECT COUNT(*) FROM messages WHERE user_id=?", (self._user_id,)).fetchone()[0]

    def speakers(self) -> dict[str, set[str]]:
        """Speaker name -> the roles they speak in, over this user's messages."""
        out: dict[str, set[str]] = {}
        for r in self._store.conn.execute("SELECT DISTINCT speaker, role FROM messages WHERE user_id=? AND speaker IS "
                                          "NOT NULL",
                                          (self._user_id,)):
            out.setdefault(r[0], set()).add(r[1])
        return out

    def __repr__(self) -> str:
        return f"UserMemory(user={self._user_id!r}, messages={self.count()})"
