"""The interface both hot-state backends implement, and the Redis -> SQLite fallback (seed §9.7)."""
from __future__ import annotations

import threading
import time
import warnings
from typing import Any, Callable, Protocol

L2Update = Callable[[dict[str, Any] | None], dict[str, Any]]


class HotStateBackend(Protocol):
    """Sessions and current L2 state. A session expires `ttl` seconds after its last touch; touching
    it also restarts its L2 state's timer (`l2_ttl`), so L2 never expires under a live session."""

    name: str

    def create_session(self, session_id: str, data: dict[str, Any], ttl: float, now: float) -> bool:
        """Store a new session; False if the id is taken."""

    def get_session(self, session_id: str, now: float) -> dict[str, Any] | None: ...

    def touch_session(self, session_id: str, ttl: float, l2_ttl: float, now: float) -> bool: ...

    def get_l2(self, session_id: str, now: float) -> dict[str, Any] | None: ...

    def update_l2(self, session_id: str, update: L2Update, ttl: float, now: float) -> dict[str, Any]:
        """Atomically replace the state by `update(current state or None)` (compare-and-set); returns it."""

    def put_session(self, session_id: str, data: dict[str, Any], expires_at: float, now: float) -> None:
        """Write a session as it is elsewhere (mirror and resync)."""

    def put_l2(self, session_id: str, state: dict[str, Any], expires_at: float, now: float) -> None:
        """Write an L2 state unless a newer version (`state["version"]`) is stored."""

    def expiry(self, session_id: str, now: float) -> tuple[float | None, float | None]:
        """(session expires_at, l2 expires_at), None where absent."""


class FallbackBackend:
    """Redis first, SQLite as a write-through mirror (seed §9.7: a Redis failure must not stop the flow).

    Every write goes to Redis and then to the SQLite mirror, so a fallback keeps every live session and
    its L2 state. On any Redis error the call is served from SQLite (one warning), writes made meanwhile
    are remembered, and Redis is tried again every `retry_after` seconds; when it answers, the sessions
    written meanwhile are copied back and Redis is primary again.
    """

    def __init__(self, primary, mirror, errors: tuple[type[BaseException], ...], retry_after: float = 5.0,
                 monotonic: Callable[[], float] = time.monotonic, clock: Callable[[], float] = time.time):
        self.primary, self.mirror, self.errors = primary, mirror, errors
        self.retry_after, self.monotonic, self.clock = retry_after, monotonic, clock  # clock: the sessions' own
        self.active = primary
        self._down_at: float | None = None
        self._dirty: set[str] = set()
        self._lock = threading.RLock()

    @property
    def name(self) -> str:
        return self.active.name

    def _primary_ok(self) -> bool:
        """Whether to try Redis now (it is up, or the retry interval has passed since it failed)."""
        with self._lock:
            if self.active is self.primary:
                return True
            if self.monotonic() - self._down_at < self.retry_after:
                return False
            try:
                self.primary.ping()
                self._resync()
            except self.errors:
                self._down_at = self.monotonic()
                return False
            self.active, self._down_at = self.primary, None
            warnings.warn("redis backend is back; resynced the sessions written meanwhile", RuntimeWarning, stacklevel=4)
            return True

    def _resync(self) -> None:
        now = self.clock()
        for sid in sorted(self._dirty):
            s_exp, l2_exp = self.mirror.expiry(sid, now)
            data = self.mirror.get_session(sid, now)
            if data is not None and s_exp is not None:
                self.primary.put_session(sid, data, s_exp, now)
            state = self.mirror.get_l2(sid, now)
            if state is not None and l2_exp is not None:
                self.primary.put_l2(sid, state, l2_exp, now)
        self._dirty.clear()

    def _failed(self, exc: BaseException) -> None:
        with self._lock:
            if self.active is self.primary:
                warnings.warn(f"redis backend failed ({type(exc).__name__}: {exc}); continuing on SQLite and retrying "
                              f"redis every {self.retry_after:g} s", RuntimeWarning, stacklevel=4)
            self.active, self._down_at = self.mirror, self.monotonic()

    def _read(self, method: str, *args):
        if self._primary_ok():
            try:
                return getattr(self.primary, method)(*args)
            except self.errors as exc:
                self._failed(exc)
        return getattr(self.mirror, method)(*args)

    def _write(self, session_id: str, primary_call: Callable[[], Any], mirror_call: Callable[[Any], Any]):
        """Redis first, then the mirror with Redis's result; the mirror alone (remembered) when Redis fails."""
        if self._primary_ok():
            try:
                result = primary_call()
            except self.errors as exc:
                self._failed(exc)
            else:
                mirror_call(result)
                return result
        with self._lock:
            self._dirty.add(session_id)
        return mirror_call(None)

    # --- the backend interface ------------------------------------------------------------------
    def get_session(self, session_id, now):
        return self._read("get_session", session_id, now)

    def get_l2(self, session_id, now):
        return self._read("get_l2", session_id, now)

    def expiry(self, session_id, now):
        return self._read("expiry", session_id, now)

    def create_session(self, session_id, data, ttl, now):
        def mirror(created):
            if created is None:
                return self.mirror.create_session(session_id, data, ttl, now)
            if created:
                self.mirror.put_session(session_id, data, now + ttl, now)
            return created
        return self._write(session_id, lambda: self.primary.create_session(session_id, data, ttl, now), mirror)

    def touch_session(self, session_id, ttl, l2_ttl, now):
        def mirror(touched):
            if touched is None:
                return self.mirror.touch_session(session_id, ttl, l2_ttl, now)
            if touched:  # the mirror may lack it (written before the mirror existed): copy it over
                if not self.mirror.touch_session(session_id, ttl, l2_ttl, now):
                    data = self.primary.get_session(session_id, now)
                    if data is not None:
                        self.mirror.put_session(session_id, data, now + ttl, now)
            return touched
        return self._write(session_id, lambda: self.primary.touch_session(session_id, ttl, l2_ttl, now), mirror)

    def update_l2(self, session_id, update, ttl, now):
        def mirror(state):
            if state is None:
                return self.mirror.update_l2(session_id, update, ttl, now)
            self.mirror.put_l2(session_id, state, now + ttl, now)
            return state
        return self._write(session_id, lambda: self.primary.update_l2(session_id, update, ttl, now), mirror)
