"""Redis hot state with real TTLs: keys `session:{id}` and `l2_memory:{id}` (seed §4.2)."""
from __future__ import annotations

import json
import math
from typing import Any


class RedisBackend:
    name = "redis"

    def __init__(self, url: str, socket_timeout: float = 2.0):
        import redis

        self.url = url
        self.client = redis.Redis.from_url(url, socket_timeout=socket_timeout, socket_connect_timeout=socket_timeout,
                                           decode_responses=True)
        self.client.ping()

    @staticmethod
    def errors() -> tuple[type[BaseException], ...]:
        import redis

        return (redis.ConnectionError, redis.TimeoutError, OSError)

    @staticmethod
    def _ms(ttl: float) -> int:
        return max(1, math.ceil(ttl * 1000))

    def create_session(self, session_id: str, data: dict[str, Any], ttl: float, now: float) -> bool:
        return bool(self.client.set(f"session:{session_id}", json.dumps(data), px=self._ms(ttl), nx=True))

    def get_session(self, session_id: str, now: float) -> dict[str, Any] | None:
        raw = self.client.get(f"session:{session_id}")
        return None if raw is None else json.loads(raw)

    def touch_session(self, session_id: str, ttl: float, now: float) -> bool:
        key = f"session:{session_id}"
        raw = self.client.get(key)
        if raw is None:
            return False
        data = json.loads(raw) | {"last_active": now}
        return bool(self.client.set(key, json.dumps(data), px=self._ms(ttl), xx=True))

    def get_l2(self, session_id: str, now: float) -> dict[str, Any] | None:
        raw = self.client.get(f"l2_memory:{session_id}")
        return None if raw is None else json.loads(raw)

    def set_l2(self, session_id: str, state: dict[str, Any], ttl: float, now: float) -> None:
        self.client.set(f"l2_memory:{session_id}", json.dumps(state, ensure_ascii=False), px=self._ms(ttl))
