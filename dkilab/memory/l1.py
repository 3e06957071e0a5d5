"""L1: conversation memory per session (seed session-l1-l2-memory §3), stored in the MemoryStore.

Every saved query and answer becomes a `Message` (id `{session_id}:{turn_id}:{role}`), so recall
and the query tools see it. Turn ids start at 1 per session; an answer shares its query's turn id.
"""
from __future__ import annotations

import time
from typing import Any, Callable

from dkilab.memory.sessions import DEFAULT_USER, SessionManager, SessionRecord, iso
from dkilab.types import Message


class L1Memory:
    def __init__(self, store, sessions: SessionManager, records: SessionRecord, clock: Callable[[], float] = time.time):
        self.store, self.sessions, self.records, self.clock = store, sessions, records, clock

    def _max_turn(self, session_id: str) -> int | None:
        return self.store.conn.execute("SELECT MAX(turn_id) FROM messages WHERE session_id=?", (session_id,)).fetchone()[0]

    def _session_user(self, session_id: str) -> str | None:
        row = self.store.conn.execute("SELECT user_id FROM messages WHERE session_id=? LIMIT 1", (session_id,)).fetchone()
        if row:
            return row[0]
        data = self.sessions.get_session(session_id)
        return data["user_id"] if data else None

    def _save(self, session_id: str, turn_id: int, role: str, content: str, user_id: str) -> None:
        if not isinstance(content, str) or not content.strip():
            raise ValueError(f"L1: empty {role} content for session {session_id!r} turn {turn_id}")
        msg = Message(message_id=f"{session_id}:{turn_id}:{role}", user_id=user_id, session_id=session_id,
                      turn_id=turn_id, role=role, content=content, timestamp=self.clock())
        self.store.add_messages([msg])
        self.sessions.touch(session_id)
        self.records.touch(session_id)

    def save_user_query(self, session_id: str, turn_id: int | None = None, content: str = "",
                        user_id: str | int | None = None) -> int:
        """Save the user's query (before any rewriting); returns its turn id. Turn 1 creates the session record."""
        known = self._session_user(session_id)
        user = str(user_id) if user_id is not None else (known or DEFAULT_USER)
        if known is not None and known != user:
            raise ValueError(f"session {session_id!r} belongs to user {known!r}, not {user!r}")
        if turn_id is None:
            turn_id = (self._max_turn(session_id) or 0) + 1
        if turn_id < 1:
            raise ValueError(f"turn_id must be >= 1, got {turn_id}")
        self._save(session_id, turn_id, "user", content, user)
        if turn_id == 1:
            self.records.create_session_record(session_id, user, content)
        return turn_id

    def save_assistant_answer(self, session_id: str, turn_id: int | None = None, content: str = "") -> int:
        """Save the assistant's answer under its query's turn id (the session's latest turn by default)."""
        user = self._session_user(session_id)
        if user is None:
            raise ValueError(f"session {session_id!r} has no saved user query and no live session to take a user from")
        if turn_id is None:
            turn_id = self._max_turn(session_id) or 1
        self._save(session_id, turn_id, "assistant", content, user)
        return turn_id

    def get_conversation_history(self, session_id: str, limit: int = 50) -> list[dict[str, Any]]:
        """The latest `limit` messages of the session in turn order (user before assistant in a turn)."""
        if not isinstance(limit, int) or limit < 1:
            raise ValueError(f"limit must be a positive integer, got {limit!r}")
        rows = self.store.conn.execute(
            "SELECT turn_id, role, content, ts FROM messages WHERE session_id=? "
            "ORDER BY turn_id DESC, CASE role WHEN 'user' THEN 0 ELSE 1 END DESC, ts DESC LIMIT ?",
            (session_id, limit)).fetchall()
        return [{"session_id": session_id, "turn_id": r["turn_id"], "role": r["role"], "content": r["content"],
                 "timestamp": iso(r["ts"])} for r in reversed(rows)]
