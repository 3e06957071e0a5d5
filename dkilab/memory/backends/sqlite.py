"""SQLite hot state: expiry is computed from the injected clock (last write + ttl).

Each write is one `BEGIN IMMEDIATE` transaction. The `*_in` methods do the same work inside a
transaction the caller already holds (the Redis fallback runs Redis and its mirror under one lock).
"""
from __future__ import annotations

import json
import sqlite3
from typing import Any, Callable

from dkilab.memory.sqlite import transaction, with_retry

SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions(
    session_id TEXT PRIMARY KEY, data TEXT NOT NULL, expires_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS l2_state(
    session_id TEXT PRIMARY KEY, state TEXT NOT NULL, expires_at REAL NOT NULL);
"""

Audit = Callable[[Any, dict], None]


class SQLiteBackend:
    name = "sqlite"

    def __init__(self, conn: sqlite3.Connection):
        self.conn = conn
        with_retry(lambda: conn.executescript(SCHEMA))

    def ping(self) -> bool:
        return True

    def _tx(self, fn: Callable[[sqlite3.Connection], Any]) -> Any:
        def run():
            with transaction(self.conn) as c:
                return fn(c)
        return with_retry(run)

    # --- inside a transaction the caller holds --------------------------------------------------
    @staticmethod
    def create_in(c, session_id: str, data: dict[str, Any], ttl: float, now: float) -> bool:
        row = c.execute("SELECT expires_at FROM sessions WHERE session_id=?", (session_id,)).fetchone()
        if row:
            return False
        c.execute("INSERT INTO sessions VALUES(?,?,?)", (session_id, json.dumps(data), now + ttl))
        return True

    @staticmethod
    def touch_in(c, session_id: str, ttl: float, l2_ttl: float, now: float) -> bool:
        row = c.execute("SELECT data, expires_at FROM sessions WHERE session_id=?", (session_id,)).fetchone()
        if row is None or row["expires_at"] <= now:
            return False
        data = json.loads(row["data"]) | {"last_active": now}
        c.execute("UPDATE sessions SET data=?, expires_at=? WHERE session_id=?",
                  (json.dumps(data), now + ttl, session_id))
        c.execute("UPDATE l2_state SET expires_at=MAX(expires_at, ?) WHERE session_id=? AND expires_at>?",
                  (now + l2_ttl, session_id, now))
        return True

    @staticmethod
    def update_l2_in(c, session_id: str, update, ttl: float, now: float, audit: Audit | None = None) -> dict[str, Any]:
        row = c.execute("SELECT state, expires_at FROM l2_state WHERE session_id=?", (session_id,)).fetchone()
        current = json.loads(row["state"]) if row is not None and row["expires_at"] > now else None
        state = update(current)
        c.execute("INSERT OR REPLACE INTO l2_state VALUES(?,?,?)",
                  (session_id, json.dumps(state, ensure_ascii=False), now + ttl))
        if audit is not None:
            audit(c, state)
        return state

    @staticmethod
    def put_session_in(c, session_id: str, data: dict[str, Any], expires_at: float) -> None:
        c.execute("INSERT OR REPLACE INTO sessions VALUES(?,?,?)", (session_id, json.dumps(data), expires_at))

    @staticmethod
    def put_l2_in(c, session_id: str, state: dict[str, Any], expires_at: float) -> None:
        c.execute("INSERT INTO l2_state VALUES(?,?,?) ON CONFLICT(session_id) DO UPDATE SET "
                  "state=excluded.state, expires_at=excluded.expires_at "
                  "WHERE json_extract(excluded.state, '$.version') >= "
                  "COALESCE(json_extract(l2_state.state, '$.version'), 0)",
                  (session_id, json.dumps(state, ensure_ascii=False), expires_at))

    @staticmethod
    def live(c, now: float) -> tuple[list, list]:
        """Every live (session_id, data, expires_at) and (session_id, L2 state, expires_at)."""
        sessions = [(r[0], json.loads(r[1]), r[2]) for r in
                    c.execute("SELECT session_id, data, expires_at FROM sessions WHERE expires_at>?", (now,))]
        states = [(r[0], json.loads(r[1]), r[2]) for r in
                  c.execute("SELECT session_id, state, expires_at FROM l2_state WHERE expires_at>?", (now,))]
        return sessions, states

    # --- the backend interface ------------------------------------------------------------------
    def create_session(self, session_id: str, data: dict[str, Any], ttl: float, now: float) -> bool:
        return self._tx(lambda c: self.create_in(c, session_id, data, ttl, now))

    def get_session(self, session_id: str, now: float) -> dict[str, Any] | None:
        row = self.conn.execute("SELECT data, expires_at FROM sessions WHERE session_id=?", (session_id,)).fetchone()
        if row is None or row["expires_at"] <= now:
            return None
        return json.loads(row["data"])

    def touch_session(self, session_id: str, ttl: float, l2_ttl: float, now: float) -> bool:
        return self._tx(lambda c: self.touch_in(c, session_id, ttl, l2_ttl, now))

    def get_l2(self, session_id: str, now: float) -> dict[str, Any] | None:
        row = self.conn.execute("SELECT state, expires_at FROM l2_state WHERE session_id=?", (session_id,)).fetchone()
        if row is None or row["expires_at"] <= now:
            return None
        return json.loads(row["state"])

    def update_l2(self, session_id: str, update, ttl: float, now: float, audit: Audit | None = None) -> dict[str, Any]:
        """Read-modify-write under the write lock (BEGIN IMMEDIATE); `audit(c, state)` in the same transaction."""
        return self._tx(lambda c: self.update_l2_in(c, session_id, update, ttl, now, audit))

    def put_session(self, session_id: str, data: dict[str, Any], expires_at: float, now: float) -> None:
        self._tx(lambda c: self.put_session_in(c, session_id, data, expires_at))

    def put_l2(self, session_id: str, state: dict[str, Any], expires_at: float, now: float) -> None:
        self._tx(lambda c: self.put_l2_in(c, session_id, state, expires_at))

    def expiry(self, session_id: str, now: float) -> tuple[float | None, float | None]:
        s = self.conn.execute("SELECT expires_at FROM sessions WHERE session_id=? AND expires_at>?",
                              (session_id, now)).fetchone()
        l2 = self.conn.execute("SELECT expires_at FROM l2_state WHERE session_id=? AND expires_at>?",
                               (session_id, now)).fetchone()
        return (s[0] if s else None), (l2[0] if l2 else None)
