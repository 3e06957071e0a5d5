"""Sessions and session records (seed session-l1-l2-memory §2)."""
from __future__ import annotations

import sqlite3
import time
from datetime import datetime, timezone
from typing import Any, Callable

from dkilab.memory.sqlite import transaction, with_retry

DEFAULT_TTL = 1800.0  # seconds of inactivity after which a session expires (seed §2.2)
DEFAULT_USER = "10000"

RECORD_SCHEMA = """
CREATE TABLE IF NOT EXISTS session_records(
    session_id TEXT PRIMARY KEY, user_id TEXT NOT NULL, title TEXT NOT NULL, first_question TEXT NOT NULL,
    created_at REAL NOT NULL, updated_at REAL NOT NULL);
CREATE INDEX IF NOT EXISTS session_records_user ON session_records(user_id, created_at);
"""


def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=timezone.utc).isoformat().replace("+00:00", "Z")


class SessionManager:
    """Creates sessions `sess_{user_id}_{unix_ts}` that expire `ttl` seconds after their last use.

    Two sessions created for one user within the same second get `_2`, `_3`, ... appended.
    `clock` (epoch seconds) can be injected in tests; the Redis backend expires keys in real time.
    """

    def __init__(self, backend, ttl: float = DEFAULT_TTL, clock: Callable[[], float] = time.time):
        if ttl <= 0:
            raise ValueError(f"session ttl must be positive, got {ttl}")
        self.backend, self.ttl, self.clock = backend, float(ttl), clock

    def create_session(self, user_id: str | int = DEFAULT_USER) -> str:
        user_id = str(user_id)
        if not user_id or any(c.isspace() for c in user_id):
            raise ValueError(f"user_id {user_id!r} cannot be used in a session id")
        now = self.clock()
        base = f"sess_{user_id}_{int(now)}"
        data = {"user_id": user_id, "created_at": now, "last_active": now}
        for n in range(1, 10_000):
            session_id = base if n == 1 else f"{base}_{n}"
            if self.backend.create_session(session_id, {"session_id": session_id, **data}, self.ttl, now):
                return session_id
        raise RuntimeError(f"could not allocate a session id for user {user_id!r}")  # pragma: no cover

    def get_session(self, session_id: str) -> dict[str, Any] | None:
        """The live session's data (session_id, user_id, created_at, last_active), or None if expired/unknown."""
        return self.backend.get_session(session_id, self.clock())

    def is_valid(self, session_id: str) -> bool:
        return self.get_session(session_id) is not None

    def touch(self, session_id: str) -> bool:
        """Mark the session used now (restarts its TTL); False if it has expired."""
        return self.backend.touch_session(session_id, self.ttl, self.clock())

    def get_or_create_session(self, user_id: str | int = DEFAULT_USER, session_id: str | None = None) -> str:
        """Continue `session_id` if it is live and belongs to `user_id`, else start a new session."""
        if session_id:
            data = self.get_session(session_id)
            if data is not None and data["user_id"] == str(user_id) and self.touch(session_id):
                return session_id
        return self.create_session(user_id)


class SessionRecord:
    """Permanent session list for a user (title = first question), kept in SQLite (the seed's ES index)."""

    def __init__(self, conn: sqlite3.Connection, clock: Callable[[], float] = time.time):
        self.conn, self.clock = conn, clock
        with_retry(lambda: conn.executescript(RECORD_SCHEMA))

    def create_session_record(self, session_id: str, user_id: str | int, first_question: str) -> bool:
        now = self.clock()

        def create():
            with transaction(self.conn) as c:
                cur = c.execute("INSERT OR IGNORE INTO session_records VALUES(?,?,?,?,?,?)",
                                (session_id, str(user_id), first_question, first_question, now, now))
                return cur.rowcount == 1
        return with_retry(create)

    def touch(self, session_id: str) -> None:
        now = self.clock()

        def update():
            with transaction(self.conn) as c:
                c.execute("UPDATE session_records SET updated_at=? WHERE session_id=?", (now, session_id))
        with_retry(update)

    def get_session_record(self, session_id: str) -> dict[str, Any] | None:
        row = self.conn.execute("SELECT * FROM session_records WHERE session_id=?", (session_id,)).fetchone()
        return None if row is None else self._as_dict(row)

    def list_session_records(self, user_id: str | int, limit: int = 50) -> list[dict[str, Any]]:
        """The user's sessions, newest first."""
        if not isinstance(limit, int) or limit < 1:
            raise ValueError(f"limit must be a positive integer, got {limit!r}")
        rows = self.conn.execute(
            "SELECT rowid, * FROM session_records WHERE user_id=? ORDER BY created_at DESC, rowid DESC LIMIT ?",
            (str(user_id), limit)).fetchall()
        return [self._as_dict(r) for r in rows]

    @staticmethod
    def _as_dict(row) -> dict[str, Any]:
        return {"session_id": row["session_id"], "user_id": row["user_id"], "title": row["title"],
                "first_question": row["first_question"], "created_at": iso(row["created_at"]),
                "updated_at": iso(row["updated_at"])}
