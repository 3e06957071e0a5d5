"""MemoryManager: one entry point for sessions, session records, L1 and L2 on a MemoryStore."""
from __future__ import annotations

import time
import warnings
from typing import Callable, Sequence

from dkilab.memory.backends.base import FallbackBackend
from dkilab.memory.backends.sqlite import SQLiteBackend
from dkilab.memory.l1 import L1Memory
from dkilab.memory.l2 import DEFAULT_STAGE_ORDER, L2Memory
from dkilab.memory.sessions import DEFAULT_TTL, SessionManager, SessionRecord


def make_backend(conn, backend: str = "sqlite", redis_url: str | None = None, strict: bool = False):
    """The hot-state backend. With `redis`, an unreachable server falls back to SQLite with a warning
    unless `strict` (seed §9.7: a Redis failure must not stop the main flow)."""
    sqlite = SQLiteBackend(conn)
    if backend == "sqlite":
        return sqlite
    if backend != "redis":
        raise ValueError(f"memory backend must be 'sqlite' or 'redis', got {backend!r}")
    from dkilab.memory.backends.redis import RedisBackend

    url = redis_url or "redis://127.0.0.1:6379/0"
    try:
        redis = RedisBackend(url)
    except RedisBackend.errors() as exc:
        if strict:
            raise ConnectionError(f"redis backend at {url} is unreachable: {exc}") from exc
        warnings.warn(f"redis backend at {url} is unreachable ({exc}); using SQLite", RuntimeWarning, stacklevel=2)
        return sqlite
    if strict:
        return redis
    return FallbackBackend(redis, sqlite, RedisBackend.errors())


class MemoryManager:
    def __init__(self, store, backend: str = "sqlite", redis_url: str | None = None, strict: bool = False,
                 ttl: float = DEFAULT_TTL, stage_order: Sequence[str] = DEFAULT_STAGE_ORDER,
                 clock: Callable[[], float] = time.time):
        self.store = store
        self.backend = make_backend(store.conn, backend, redis_url, strict)
        self.sessions = SessionManager(self.backend, ttl=ttl, clock=clock)
        self.records = SessionRecord(store.conn, clock=clock)
        self.l1 = L1Memory(store, self.sessions, self.records, clock=clock)
        self.l2 = L2Memory(self.backend, store.conn, stage_order=stage_order, ttl=ttl, clock=clock)
