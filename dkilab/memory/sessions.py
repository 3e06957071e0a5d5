"""Sessions and session records (seed session-l1-l2-memory §2)."""
from __future__ import annotations

import secrets
import sqlite3
import time
from datetime import datetime, timezone
from typing import Any, Callable

from dkilab.memory.sqlite import transaction, with_retry

SESSION_TTL = 1800.0  # seconds of inactivity after which a session expires (seed §2.2, §6.2)
L2_MEMORY_TTL = 1800.0  # seconds an L2 state lives after its session's last use (seed §4.2, §6.2)
DEFAULT_TTL = SESSION_TTL
DEFAULT_USER = "10000"

RECORD_SCHEMA = """
CREATE TABLE IF NOT EXISTS session_records(
    session_id TEXT PRIMARY KEY, user_id TEXT NOT NULL, title TEXT NOT NULL, first_question TEXT NOT NULL,
    created_at REAL NOT NULL, updated_at REAL NOT NULL);
CREATE INDEX IF NOT EXISTS session_records_user ON session_records(user_id, created_at);
"""


def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=timezone.utc).isoformat().replace("+00:00", "Z")


class SessionNotFoundError(KeyError):
    """No live session with that id for this user. Raised alike for an unknown id and for another user's
    session, so a session id tells nobody but its owner that it exists."""

    def __init__(self, session_id: str, expired: bool = False):
        super().__init__(session_id)
        self.session_id, self.expired = session_id, expired

    def __str__(self) -> str:
        if self.expired:
            return f"session {self.session_id!r} has expired; start a new session"
        return f"no session {self.session_id!r} for this user"


def check_user(user_id) -> str:
    """The user id as text; ValueError for None, empty or whitespace-containing ids."""
    if user_id is None or isinstance(user_id, bool) or not isinstance(user_id, (str, int)):
        raise ValueError(f"user_id must be a non-empty string or an integer, got {user_id!r}")
    user_id = str(user_id)
    if not user_id or any(c.isspace() for c in user_id):
        raise ValueError(f"user_id {user_id!r} cannot be used in a session id")
    return user_id


class SessionManager:
    """Creates sessions `sess_{user_id}_{unix_ts}_{random}` that expire `ttl` seconds after their last use.

    The seed's prefix is kept; the 48 random bits make a session id unguessable (holding one is not
    proof of anything anyway: every call also names the user and is checked against the owner).
    Touching a session also restarts its L2 state's timer (`l2_ttl`). `clock` (epoch seconds) can be
    injected in tests; the Redis backend expires keys in real time.
    """

    def __init__(self, backend, ttl: float = DEFAULT_TTL, clock: Callable[[], float] = time.time,
                 l2_ttl: float | None = None):
        if ttl <= 0 or (l2_ttl is not None and l2_ttl <= 0):
            raise ValueError(f"session ttl and l2 ttl must be positive, got {ttl}, {l2_ttl}")
        self.backend, self.ttl, self.clock = backend, float(ttl), clock
        self.l2_ttl = float(l2_ttl if l2_ttl is not None else ttl)  # L2_MEMORY_TTL = SESSION_TTL by default
        # callable session_id -> owner of an expired session (SessionRecord), set by the manager
        self.owners: Callable[[str], str | None] | None = None

    def create_session(self, user_id: str | int = DEFAULT_USER) -> str:
        user_id = check_user(user_id)
        now = self.clock()
        data = {"user_id": user_id, "created_at": now, "last_active": now}
        for _ in range(100):
            session_id = f"sess_{user_id}_{int(now)}_{secrets.token_hex(6)}"
            if self.backend.create_session(session_id, {"session_id": session_id, **data}, self.ttl, now):
                return session_id
        raise RuntimeError(f"could not allocate a session id for user {user_id!r}")  # pragma: no cover

    def get_session(self, session_id: str, user_id: str | int) -> dict[str, Any] | None:
        """The user's live session (session_id, user_id, created_at, last_active); None if expired,
        unknown or another user's."""
        user_id = check_user(user_id)
        if not isinstance(session_id, str) or not session_id:
            return None
        data = self.backend.get_session(session_id, self.clock())
        return data if data is not None and data.get("user_id") == user_id else None

    def is_valid(self, session_id: str, user_id: str | int) -> bool:
        return self.get_session(session_id, user_id) is not None

    def require(self, session_id: str, user_id: str | int) -> dict[str, Any]:
        """The user's live session, else SessionNotFoundError (expired only when it is the user's own)."""
        data = self.get_session(session_id, user_id)
        if data is None:
            raise SessionNotFoundError(session_id, expired=self.owner(session_id) == check_user(user_id))
        return data

    def owner(self, session_id: str) -> str | None:
        """Who the session belongs to, live or expired (None if nobody knows it)."""
        if not isinstance(session_id, str):
            return None
        recorded = self.owners(session_id) if self.owners else None  # SQLite first: works while Redis is down
        if recorded is not None:
            return recorded
        data = self.backend.get_session(session_id, self.clock())
        return None if data is None else data.get("user_id")

    def touch(self, session_id: str, user_id: str | int) -> bool:
        """Mark the user's session used now (restarts its TTL and its L2's); False if it has expired."""
        if self.get_session(session_id, user_id) is None:
            return False
        return self.backend.touch_session(session_id, self.ttl, self.l2_ttl, self.clock())

    def get_or_create_session(self, user_id: str | int = DEFAULT_USER, session_id: str | None = None) -> str:
        """Continue `session_id` if it is live and belongs to `user_id`, else start a new session."""
        if session_id and self.touch(session_id, user_id):
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

    def get_session_record(self, session_id: str, user_id: str | int) -> dict[str, Any] | None:
        """The user's record of the session; None if unknown or another user's."""
        row = self.conn.execute("SELECT * FROM session_records WHERE session_id=? AND user_id=?",
                                (session_id, check_user(user_id))).fetchone()
        return None if row is None else self._as_dict(row)

    def owner(self, session_id: str) -> str | None:
        row = self.conn.execute("SELECT user_id FROM session_records WHERE session_id=?", (session_id,)).fetchone()
        return None if row is None else row[0]

    def list_session_records(self, user_id: str | int, limit: int = 50) -> list[dict[str, Any]]:
        """The user's sessions, newest first."""
        if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= 10_000:
            raise ValueError(f"limit must be a positive integer, got {limit!r}")
        rows = self.conn.execute(
            "SELECT rowid, * FROM session_records WHERE user_id=? ORDER BY created_at DESC, rowid DESC LIMIT ?",
            (check_user(user_id), limit)).fetchall()
        return [self._as_dict(r) for r in rows]

    @staticmethod
    def _as_dict(row) -> dict[str, Any]:
        return {"session_id": row["session_id"], "user_id": row["user_id"], "title": row["title"],
                "first_question": row["first_question"], "created_at": iso(row["created_at"]),
                "updated_at": iso(row["updated_at"])}
