"""SQLite hot state: expiry is computed from the injected clock (last write + ttl)."""
from __future__ import annotations

import json
import sqlite3
from typing import Any

from dkilab.memory.sqlite import transaction, with_retry

SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions(
    session_id TEXT PRIMARY KEY, data TEXT NOT NULL, expires_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS l2_state(
    session_id TEXT PRIMARY KEY, state TEXT NOT NULL, expires_at REAL NOT NULL);
"""


class SQLiteBackend:
    name = "sqlite"

    def __init__(self, conn: sqlite3.Connection):
        self.conn = conn
        with_retry(lambda: conn.executescript(SCHEMA))

    def ping(self) -> bool:
        return True

    def create_session(self, session_id: str, data: dict[str, Any], ttl: float, now: float) -> bool:
        def create():
            with transaction(self.conn) as c:
                row = c.execute("SELECT expires_at FROM sessions WHERE session_id=?", (session_id,)).fetchone()
                if row:
                    return False
                c.execute("INSERT INTO sessions VALUES(?,?,?)", (session_id, json.dumps(data), now + ttl))
                return True
        return with_retry(create)

    def get_session(self, session_id: str, now: float) -> dict[str, Any] | None:
        row = self.conn.execute("SELECT data, expires_at FROM sessions WHERE session_id=?", (session_id,)).fetchone()
        if row is None or row["expires_at"] <= now:
            return None
        return json.loads(row["data"])

    def touch_session(self, session_id: str, ttl: float, l2_ttl: float, now: float) -> bool:
        def touch():
            with transaction(self.conn) as c:
                row = c.execute("SELECT data, expires_at FROM sessions WHERE session_id=?", (session_id,)).fetchone()
                if row is None or row["expires_at"] <= now:
                    return False
                data = json.loads(row["data"]) | {"last_active": now}
                c.execute("UPDATE sessions SET data=?, expires_at=? WHERE session_id=?", (json.dumps(data), now + ttl, session_id))
                c.execute("UPDATE l2_state SET expires_at=MAX(expires_at, ?) WHERE session_id=? AND expires_at>?",
                          (now + l2_ttl, session_id, now))
                return True
        return with_retry(touch)

    def get_l2(self, session_id: str, now: float) -> dict[str, Any] | None:
        row = self.conn.execute("SELECT state, expires_at FROM l2_state WHERE session_id=?", (session_id,)).fetchone()
        if row is None or row["expires_at"] <= now:
            return None
        return json.loads(row["state"])

    def update_l2(self, session_id: str, update, ttl: float, now: float) -> dict[str, Any]:
        def put():
            with transaction(self.conn) as c:  # BEGIN IMMEDIATE: read-modify-write under the write lock
                row = c.execute("SELECT state, expires_at FROM l2_state WHERE session_id=?", (session_id,)).fetchone()
                current = json.loads(row["state"]) if row is not None and row["expires_at"] > now else None
                state = update(current)
                c.execute("INSERT OR REPLACE INTO l2_state VALUES(?,?,?)",
                          (session_id, json.dumps(state, ensure_ascii=False), now + ttl))
                return state
        return with_retry(put)

    def put_session(self, session_id: str, data: dict[str, Any], expires_at: float, now: float) -> None:
        def put():
            with transaction(self.conn) as c:
                c.execute("INSERT OR REPLACE INTO sessions VALUES(?,?,?)", (session_id, json.dumps(data), expires_at))
        with_retry(put)

    def put_l2(self, session_id: str, state: dict[str, Any], expires_at: float, now: float) -> None:
        def put():
            with transaction(self.conn) as c:
                c.execute("INSERT INTO l2_state VALUES(?,?,?) ON CONFLICT(session_id) DO UPDATE SET "
                          "state=excluded.state, expires_at=excluded.expires_at "
                          "WHERE json_extract(excluded.state, '$.version') >= "
                          "COALESCE(json_extract(l2_state.state, '$.version'), 0)",
                          (session_id, json.dumps(state, ensure_ascii=False), expires_at))
        with_retry(put)

    def expiry(self, session_id: str, now: float) -> tuple[float | None, float | None]:
        s = self.conn.execute("SELECT expires_at FROM sessions WHERE session_id=? AND expires_at>?", (session_id, now)).fetchone()
        l2 = self.conn.execute("SELECT expires_at FROM l2_state WHERE session_id=? AND expires_at>?", (session_id, now)).fetchone()
        return (s[0] if s else None), (l2[0] if l2 else None)
