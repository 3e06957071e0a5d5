"""Opaque page cursors: encrypted and authenticated (Fernet), so a cursor reveals nothing (not the
store's row ids or counts) and only works for the store, query and user that made it."""
from __future__ import annotations

import base64
import hashlib
import json
import threading
from typing import Any

from cachetools import TTLCache

MAX_CURSOR_CHARS = 2048
RESULT_SET_TTL = 3600.0
RESULT_SETS_PER_USER = 64  # live lexical cursors a user may hold; the oldest is dropped first
RESULT_SETS_TOTAL = 4096  # over all users of one store object


def query_signature(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:24]


class CursorCodec:
    def __init__(self, secret: bytes):
        from cryptography.fernet import Fernet

        self._fernet = Fernet(base64.urlsafe_b64encode(hashlib.sha256(b"dkilab-cursor:" + secret).digest()))

    def encode(self, sig: str, state: dict[str, Any]) -> str:
        return self._fernet.encrypt(json.dumps({"sig": sig, **state}, separators=(",", ":")).encode()).decode()

    def decode(self, cursor: str, sig: str) -> dict[str, Any]:
        """State of `cursor`; ValueError if it is garbled, from another store, or from another query/user."""
        from cryptography.fernet import InvalidToken

        if not isinstance(cursor, str):
            raise TypeError(f"cursor must be a string returned by this store, got {type(cursor).__name__}")
        if len(cursor) > MAX_CURSOR_CHARS or not cursor.isascii():
            raise ValueError("cursor is garbled: not a cursor returned by this store")
        try:
            state = json.loads(self._fernet.decrypt(cursor.encode()))
        except (InvalidToken, ValueError):
            raise ValueError("cursor is garbled or was issued by another store") from None
        if state.pop("sig", None) != sig:
            raise ValueError("cursor belongs to a different query, filter, tool or user; start again without a cursor")
        return state


class ResultSets:
    """Ranked result sets behind live cursors, in memory: per user the latest `per_user` (one user's queries
    never expire another's cursors), at most `total` over all users (the least recently used set goes first), each for
    `ttl` seconds. Two cachetools TTL caches that evict from each other, under one lock (the recall
    service's worker threads share a store)."""

    def __init__(self, per_user: int, total: int, ttl: float, timer=None):
        sets = self

        class _Evicting(TTLCache):
            def __init__(self, maxsize, on_evict):
                super().__init__(maxsize, ttl, **({"timer": timer} if timer else {}))
                self._on_evict = on_evict

            def popitem(self):
                key, value = super().popitem()
                self._on_evict(key)
                return key, value


        self._lock = threading.Lock()
        self._users: dict[str, Any] = {}
        self._all: Any = _Evicting(total, lambda key: sets._users.get(key[0], {}).pop(key[1], None))
        self._new_user = lambda user: _Evicting(per_user, lambda cid: sets._all.pop((user, cid), None))

    def put(self, user: str, cid: str, value: Any) -> None:
        with self._lock:
            mine = self._users.get(user)
            if mine is None:
                mine = self._users[user] = self._new_user(user)
            mine[cid] = None  # may evict this user's oldest set (and drop it from the total)
            self._all[(user, cid)] = value  # may evict the least recently used set of any user

    def get(self, user: str, cid: str) -> Any | None:
        with self._lock:
            return self._all.get((user, cid))

    def __len__(self) -> int:
        with self._lock:
            return len(self._all)
