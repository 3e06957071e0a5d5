"""MemoryManager: one entry point for sessions, session records, L1 and L2 on a MemoryStore, and
`for_user(user_id)`: the same calls bound to one user (what a service hands its request handlers)."""
from __future__ import annotations

import time
from typing import Any, Callable, Sequence

from dkilab.memory.backends.base import FallbackBackend
from dkilab.memory.backends.redis import RedisBackend
from dkilab.memory.backends.sqlite import SQLiteBackend
from dkilab.memory.l1 import L1Memory
from dkilab.memory.l2 import DEFAULT_STAGE_ORDER, L2Memory
from dkilab.memory.sessions import DEFAULT_TTL, SessionManager, SessionRecord, check_user


def make_backend(conn, backend: str = "sqlite", redis_url: str | None = None, strict: bool = False,
                 retry_after: float = 5.0, clock: Callable[[], float] = time.time):
    """The hot-state backend. With `redis`, SQLite mirrors every write and serves while Redis is down
    (with a warning; Redis is retried every `retry_after` s, also when it was down at start), unless
    `strict`, where a Redis failure raises (seed §9.7: a Redis failure must not stop the main flow)."""
    sqlite = SQLiteBackend(conn)
    if backend == "sqlite":
        return sqlite
    if backend != "redis":
        raise ValueError(f"memory backend must be 'sqlite' or 'redis', got {backend!r}")

    url = redis_url or "redis://127.0.0.1:6379/0"
    if strict:
        try:
            return RedisBackend(url)
        except RedisBackend.errors() as exc:
            raise ConnectionError(f"redis backend at {url} is unreachable: {exc}") from exc
    return FallbackBackend(RedisBackend(url, connect=False), sqlite, RedisBackend.errors(), retry_after=retry_after,
                           clock=clock)


class MemoryManager:
    """`ttl`: session idle timeout (SESSION_TTL); `l2_ttl`: L2 state timeout after the session's last
    use (L2_MEMORY_TTL, default `ttl`)."""

    def __init__(self, store, backend: str = "sqlite", redis_url: str | None = None, strict: bool = False,
                 ttl: float = DEFAULT_TTL, stage_order: Sequence[str] = DEFAULT_STAGE_ORDER,
                 clock: Callable[[], float] = time.time, l2_ttl: float | None = None, retry_after: float = 5.0):
        self.store = store
        self.backend = make_backend(store.conn, backend, redis_url, strict, retry_after, clock)
        self.sessions = SessionManager(self.backend, ttl=ttl, clock=clock, l2_ttl=l2_ttl)
        self.records = SessionRecord(store.conn, clock=clock)
        self.sessions.owners = self.records.owner
        self.l1 = L1Memory(store, self.sessions, self.records, clock=clock)
        self.l2 = L2Memory(self.sessions, store.conn, stage_order=stage_order, clock=clock)

    def for_user(self, user_id: str | int) -> "UserSessions":
        return UserSessions(self, check_user(user_id))


class UserSessions:
    """Sessions, L1 and L2 of one user: the seed's calls without a user id (bound here)."""

    def __init__(self, manager: MemoryManager, user_id: str):
        self._m, self.user_id = manager, user_id

    def create_session(self) -> str:
        return self._m.sessions.create_session(self.user_id)

    def get_or_create_session(self, session_id: str | None = None) -> str:
        return self._m.sessions.get_or_create_session(self.user_id, session_id)

    def get_session(self, session_id: str) -> dict[str, Any] | None:
        return self._m.sessions.get_session(session_id, self.user_id)

    def save_user_query(self, session_id: str, turn_id: int | None = None, content: str = "") -> int:
        return self._m.l1.save_user_query(session_id, turn_id, content, user_id=self.user_id)

    def save_assistant_answer(self, session_id: str, turn_id: int | None = None, content: str = "") -> int:
        return self._m.l1.save_assistant_answer(session_id, turn_id, content, user_id=self.user_id)

    def get_conversation_history(self, session_id: str, limit: int = 50) -> list[dict[str, Any]]:
        return self._m.l1.get_conversation_history(session_id, limit, user_id=self.user_id)

    def list_session_records(self, limit: int = 50) -> list[dict[str, Any]]:
        return self._m.records.list_session_records(self.user_id, limit)

    def get_l2_state(self, session_id: str) -> dict[str, Any] | None:
        return self._m.l2.get_l2_state(session_id, user_id=self.user_id)

    def update_l2_state(self, session_id: str, intent: str, entities: dict[str, Any] | None,
                        previous_l2: dict[str, Any] | None = None) -> dict[str, Any]:
        return self._m.l2.update_l2_state(session_id, intent, entities, previous_l2, user_id=self.user_id)

    def l2_history(self, session_id: str) -> list[dict[str, Any]]:
        return self._m.l2.history(session_id, user_id=self.user_id)
