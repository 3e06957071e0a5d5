"""Redis hot state with real TTLs: keys `session:{id}` and `l2_memory:{id}` (seed §4.2).

With a `fence` (key, epoch) every call first checks that Redis still holds that epoch under that key, in
the same atomic step as the read or write; a Redis that restarted empty, or that another process has
fenced off, raises `FenceLost` instead of answering from (or writing into) state it no longer has.
"""
from __future__ import annotations

import json
import math
from typing import Any

Fence = tuple[str, int]

_CHECK = "if ARGV[1] ~= '' and redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end\n"

# KEYS: fence, key; ARGV: epoch or '', value, px, 'nx' or ''
_SET = _CHECK + """
if ARGV[4] == 'nx' then
  if redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3], 'NX') then return 1 end
  return 0
end
redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
return 1
"""

# KEYS: fence, session, l2; ARGV: epoch or '', now, session px, l2 px. Refresh the session (last_active,
# TTL) and its L2 key's TTL in one atomic step.
_TOUCH = _CHECK + """
local raw = redis.call('GET', KEYS[2])
if not raw then return 0 end
local data = cjson.decode(raw)
data['last_active'] = tonumber(ARGV[2])
redis.call('SET', KEYS[2], cjson.encode(data), 'PX', ARGV[3])
if redis.call('PTTL', KEYS[3]) > 0 and redis.call('PTTL', KEYS[3]) < tonumber(ARGV[4]) then
  redis.call('PEXPIRE', KEYS[3], ARGV[4])
end
return 1
"""

_NO_FENCE = "dkilab:no-fence"  # a key never read when the epoch argument is ''


class FenceLost(RuntimeError):
    """Redis no longer holds the epoch this call was fenced with (it restarted empty or was fenced off)."""


class RedisBackend:
    name = "redis"

    def __init__(self, url: str, socket_timeout: float = 2.0, connect: bool = True):
        import redis

        self.url = url
        self.client = redis.Redis.from_url(url, socket_timeout=socket_timeout, socket_connect_timeout=socket_timeout,
                                           decode_responses=True)
        if connect:
            self.client.ping()
        self._set = self.client.register_script(_SET)
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

    @staticmethod
    def _fence_args(fence: Fence | None) -> tuple[str, str]:
        return (fence[0], str(fence[1])) if fence else (_NO_FENCE, "")

    def _checked(self, result, fence: Fence | None):
        if result == -1:
            held = f"epoch {fence[1]} under {fence[0]!r}" if fence is not None else "its fence"
            raise FenceLost(f"redis at {self.url} no longer holds {held}")
        return result

    def _get(self, key: str, fence: Fence | None) -> Any:
        if fence is None:
            return self.client.get(key)
        epoch, raw = self.client.mget(fence[0], key)
        self._checked(-1 if epoch != str(fence[1]) else 0, fence)
        return raw

    def _put(self, key: str, value: str, px: int, fence: Fence | None, nx: bool = False) -> bool:
        fkey, epoch = self._fence_args(fence)
        result = self._set(keys=[fkey, key], args=[epoch, value, px, "nx" if nx else ""], client=self.client)
        return bool(self._checked(result, fence))

    def fence_epoch(self, key: str) -> int | None:
        raw = self.client.get(key)
        return None if raw is None else int(raw)

    def create_session(self, session_id: str, data: dict[str, Any], ttl: float, now: float,
                       fence: Fence | None = None) -> bool:
        return self._put(f"session:{session_id}", json.dumps(data), self._ms(ttl), fence, nx=True)

    def get_session(self, session_id: str, now: float, fence: Fence | None = None) -> dict[str, Any] | None:
        raw = self._get(f"session:{session_id}", fence)
        return None if raw is None else json.loads(raw)

    def touch_session(self, session_id: str, ttl: float, l2_ttl: float, now: float, fence: Fence | None = None) -> bool:
        fkey, epoch = self._fence_args(fence)
        keys = [fkey, f"session:{session_id}", f"l2_memory:{session_id}"]
        result = self._touch(keys=keys, args=[epoch, now, self._ms(ttl), self._ms(l2_ttl)], client=self.client)
        return bool(self._checked(result, fence))

    def get_l2(self, session_id: str, now: float, fence: Fence | None = None) -> dict[str, Any] | None:
        raw = self._get(f"l2_memory:{session_id}", fence)
        return None if raw is None else json.loads(raw)

    def update_l2(self, session_id: str, update, ttl: float, now: float, audit=None,
                  fence: Fence | None = None) -> dict[str, Any]:
        """Compare-and-set with WATCH/MULTI (on the fence key too): a concurrent update makes this one
        re-read and retry. `audit(None, state)` runs after the write (Redis has no SQLite transaction)."""
        import redis

        key = f"l2_memory:{session_id}"
        with self.client.pipeline() as pipe:
            for _ in range(1000):
                try:
                    pipe.watch(key, *([fence[0]] if fence else []))
                    if fence is not None:
                        self._checked(-1 if pipe.get(fence[0]) != str(fence[1]) else 0, fence)
                    raw = pipe.get(key)
                    state = update(None if raw is None else json.loads(raw))
                    pipe.multi()
                    pipe.set(key, json.dumps(state, ensure_ascii=False), px=self._ms(ttl))
                    pipe.execute()
                    break
                except redis.WatchError:
                    continue
            else:
                raise RuntimeError(f"L2 update of session {session_id!r} lost 1000 races in a row")
        if audit is not None:
            audit(None, state)
        return state

    def put_session(self, session_id: str, data: dict[str, Any], expires_at: float, now: float,
                    fence: Fence | None = None) -> None:
        self._put(f"session:{session_id}", json.dumps(data), self._ms(expires_at - now), fence)

    def put_l2(self, session_id: str, state: dict[str, Any], expires_at: float, now: float,
               fence: Fence | None = None) -> None:
        """Write the state unless a newer version is stored (a fenced write overwrites: the fence holder
        is the only writer)."""
        if fence is None:
            current = self.get_l2(session_id, now)
            if current is not None and state.get("version", 0) < current.get("version", 0):
                return
        self._put(f"l2_memory:{session_id}", json.dumps(state, ensure_ascii=False), self._ms(expires_at - now), fence)

    def expiry(self, session_id: str, now: float, fence: Fence | None = None) -> tuple[float | None, float | None]:
        with self.client.pipeline() as pipe:  # MULTI/EXEC: the fence and both TTLs from one instant
            pipe.get(fence[0] if fence else _NO_FENCE)
            pipe.pttl(f"session:{session_id}")
            pipe.pttl(f"l2_memory:{session_id}")
            epoch, s, l2 = pipe.execute()
        if fence is not None:
            self._checked(-1 if epoch != str(fence[1]) else 0, fence)
        return (now + s / 1000 if s > 0 else None), (now + l2 / 1000 if l2 > 0 else None)

    def restore(self, sessions, l2_states, now: float, fence_key: str, epoch: int, chunk: int = 1000) -> None:
        """Copy (id, data, expires_at) sessions and L2 states over whatever Redis holds, then set the fence
        to `epoch` last: until then no fenced call accepts this Redis."""
        items = [(f"session:{sid}", json.dumps(d), exp) for sid, d, exp in sessions]
        items += [(f"l2_memory:{sid}", json.dumps(s, ensure_ascii=False), exp) for sid, s, exp in l2_states]
        for i in range(0, len(items), chunk):
            with self.client.pipeline(transaction=False) as pipe:
                for key, value, exp in items[i:i + chunk]:
                    if exp > now:
                        pipe.set(key, value, px=self._ms(exp - now))
                pipe.execute()
        self.client.set(fence_key, str(epoch))
