"""L1: conversation memory per session (seed session-l1-l2-memory §3), stored in the MemoryStore.

Every saved query and answer becomes a `Message` (id `{session_id}:{turn_id}:{role}`), so recall
and the query tools see it. Turn ids start at 1 per session; an answer shares its query's turn id.
Every call names the user; a session that is not the user's is reported exactly like an unknown one.
Saving needs a live session; a new turn id is allocated and stored atomically (threads, processes).
"""
from __future__ import annotations

import time
from typing import Any, Callable

from dkilab.memory.sessions import SessionManager, SessionNotFoundError, SessionRecord, check_user, iso
from dkilab.types import Message, to_utc

MAX_CONTENT_CHARS = 100_000


class L1Memory:
    def __init__(self, store, sessions: SessionManager, records: SessionRecord, clock: Callable[[], float] = time.time):
        self.store, self.sessions, self.records, self.clock = store, sessions, records, clock

    def _message(self, session_id: str, turn_id: int, role: str, content: str, user_id: str) -> Message:
        return Message(message_id=f"{session_id}:{turn_id}:{role}", user_id=user_id, session_id=session_id,
                       turn_id=turn_id, role=role, content=content, timestamp=to_utc(self.clock()))

    @staticmethod
    def _check(role: str, session_id: str, content, turn_id) -> None:
        if not isinstance(content, str) or not content.strip():
            raise ValueError(f"L1: empty {role} content for session {session_id!r}")
        if len(content) > MAX_CONTENT_CHARS:
            raise ValueError(f"L1: {role} content of {len(content)} characters exceeds {MAX_CONTENT_CHARS}")
        if turn_id is not None and (not isinstance(turn_id, int) or isinstance(turn_id, bool) or turn_id < 1):
            raise ValueError(f"turn_id must be an integer >= 1, got {turn_id!r}")

    def _live(self, session_id: str, user: str) -> None:
        """The session must be the user's and live; touching it first means a hot-state failure (Redis,
        strict) stops the call before anything is stored, so a retry cannot duplicate the turn."""
        if not self.sessions.touch(session_id, user):  # one read and one write when all is well
            self.sessions.require(session_id, user)  # raises: unknown, another user's, or expired
            raise SessionNotFoundError(session_id, expired=True)  # expired between the two reads

    def save_user_query(self, session_id: str, turn_id: int | None = None, content: str = "", *,
                        user_id: str | int) -> int:
        """Save the user's query (before any rewriting) in the user's live session; returns its turn id
        (the next one unless given; a retry with the returned turn id is a no-op). Turn 1 creates the
        session record."""
        user = check_user(user_id)
        self._check("user", session_id, content, turn_id)
        self._live(session_id, user)
        if turn_id is None:
            turn_id = self.store.add_turn(user, session_id,
                                          lambda t: self._message(session_id, t, "user", content, user)).turn_id
        else:
            self.store.add_messages([self._message(session_id, turn_id, "user", content, user)])
        if turn_id == 1:
            self.records.create_session_record(session_id, user, content)
        self.records.touch(session_id)
        return turn_id

    def save_assistant_answer(self, session_id: str, turn_id: int | None = None, content: str = "", *,
                              user_id: str | int) -> int:
        """Save the assistant's answer under its query's turn id (the session's latest query by default);
        the turn must have a saved user query."""
        user = check_user(user_id)
        self._check("assistant", session_id, content, turn_id)
        self._live(session_id, user)
        c = self.store.conn
        if turn_id is None:
            turn_id = c.execute("SELECT MAX(turn_id) FROM messages WHERE user_id=? AND session_id=? AND role='user'",
                                (user, session_id)).fetchone()[0]
            if turn_id is None:
                raise ValueError(f"session {session_id!r} has no saved user query to answer")
        elif c.execute("SELECT 1 FROM messages WHERE user_id=? AND message_id=?",
                       (user, f"{session_id}:{turn_id}:user")).fetchone() is None:
            raise ValueError(f"session {session_id!r} has no user query at turn {turn_id} to answer")
        self.store.add_messages([self._message(session_id, turn_id, "assistant", content, user)])
        self.records.touch(session_id)
        return turn_id

    def get_conversation_history(self, session_id: str, limit: int = 50, *, user_id: str | int) -> list[dict[str, Any]]:
        """The latest `limit` messages of the user's session (live or expired) in turn order (user before
        assistant in a turn)."""
        user = check_user(user_id)
        if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= 10_000:
            raise ValueError(f"limit must be an integer between 1 and 10000, got {limit!r}")
        if self.sessions.owner(session_id) != user and not self._has_messages(session_id, user):
            raise SessionNotFoundError(session_id)
        rows = self.store.conn.execute(
            "SELECT turn_id, role, content, ts FROM messages WHERE user_id=? AND session_id=? "
            "ORDER BY turn_id DESC, CASE role WHEN 'user' THEN 0 ELSE 1 END DESC, ts DESC LIMIT ?",
            (user, session_id, limit)).fetchall()
        return [{"session_id": session_id, "turn_id": r["turn_id"], "role": r["role"], "content": r["content"],
                 "timestamp": iso(r["ts"])} for r in reversed(rows)]

    def _has_messages(self, session_id: str, user: str) -> bool:
        return self.store.conn.execute("SELECT 1 FROM messages WHERE user_id=? AND session_id=? LIMIT 1",
                                       (user, session_id)).fetchone() is not None
