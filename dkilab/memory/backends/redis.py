"""Redis hot state with real TTLs: keys `session:{id}` and `l2_memory:{id}` (seed §4.2)."""
from __future__ import annotations

import json
import math
from typing import Any

# touch: refresh the session (last_active, TTL) and its L2 key's TTL in one atomic step
_TOUCH = """
local raw = redis.call('GET', KEYS[1])
if not raw then return 0 end
local data = cjson.decode(raw)
data['last_active'] = tonumber(ARGV[1])
redis.call('SET', KEYS[1], cjson.encode(data), 'PX', ARGV[2])
if redis.call('PTTL', KEYS[2]) > 0 and redis.call('PTTL', KEYS[2]) < tonumber(ARGV[3]) then
  redis.call('PEXPIRE', KEYS[2], ARGV[3])
end
return 1
"""


class RedisBackend:
    name = "redis"

    def __init__(self, url: str, socket_timeout: float = 2.0):
        import redis

        self.url = url
        self.client = redis.Redis.from_url(url, socket_timeout=socket_timeout, socket_connect_timeout=socket_timeout,
                                           decode_responses=True)
        self.client.ping()
        self._touch = self.client.register_script(_TOUCH)

    @staticmethod
    def errors() -> tuple[type[BaseException], ...]:
        """Every failure of the server or the connection (down, timeout, OOM and other error replies)."""
        import redis

        return (redis.RedisError, OSError)

    def ping(self) -> bool:
        return bool(self.client.ping())

    @staticmethod
    def _ms(ttl: float) -> int:
        return max(1, math.ceil(ttl * 1000))

    def create_session(self, session_id: str, data: dict[str, Any], ttl: float, now: float) -> bool:
        return bool(self.client.set(f"session:{session_id}", json.dumps(data), px=self._ms(ttl), nx=True))

    def get_session(self, session_id: str, now: float) -> dict[str, Any] | None:
        raw = self.client.get(f"session:{session_id}")
        return None if raw is None else json.loads(raw)

    def touch_session(self, session_id: str, ttl: float, l2_ttl: float, now: float) -> bool:
        keys = [f"session:{session_id}", f"l2_memory:{session_id}"]
        return bool(self._touch(keys=keys, args=[now, self._ms(ttl), self._ms(l2_ttl)], client=self.client))

    def get_l2(self, session_id: str, now: float) -> dict[str, Any] | None:
        raw = self.client.get(f"l2_memory:{session_id}")
        return None if raw is None else json.loads(raw)

    def update_l2(self, session_id: str, update, ttl: float, now: float) -> dict[str, Any]:
        """Compare-and-set with WATCH/MULTI: a concurrent update makes this one re-read and retry."""
        import redis

        key = f"l2_memory:{session_id}"
        with self.client.pipeline() as pipe:
            for _ in range(1000):
                try:
                    pipe.watch(key)
                    raw = pipe.get(key)
                    state = update(None if raw is None else json.loads(raw))
                    pipe.multi()
                    pipe.set(key, json.dumps(state, ensure_ascii=False), px=self._ms(ttl))
                    pipe.execute()
                    return state
                except redis.WatchError:
                    continue
        raise RuntimeError(f"L2 update of session {session_id!r} lost 1000 races in a row")

    def put_session(self, session_id: str, data: dict[str, Any], expires_at: float, now: float) -> None:
        self.client.set(f"session:{session_id}", json.dumps(data), px=self._ms(expires_at - now))

    def put_l2(self, session_id: str, state: dict[str, Any], expires_at: float, now: float) -> None:
        current = self.get_l2(session_id, now)
        if current is None or state.get("version", 0) >= current.get("version", 0):
            self.client.set(f"l2_memory:{session_id}", json.dumps(state, ensure_ascii=False), px=self._ms(expires_at - now))

    def expiry(self, session_id: str, now: float) -> tuple[float | None, float | None]:
        s, l2 = (self.client.pttl(k) for k in (f"session:{session_id}", f"l2_memory:{session_id}"))
        return (now + s / 1000 if s > 0 else None), (now + l2 / 1000 if l2 > 0 else None)
