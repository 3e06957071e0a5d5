"""The interface both hot-state backends implement, and the Redis -> SQLite fallback (seed §9.7)."""
from __future__ import annotations

import time
import uuid
import warnings
from typing import Any, Callable, Protocol

from dkilab.memory.backends.redis import FenceLost, RedisBackend
from dkilab.memory.backends.sqlite import SQLiteBackend
from dkilab.memory.sqlite import transaction, with_retry

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

    def update_l2(self, session_id: str, update: L2Update, ttl: float, now: float, audit=None) -> dict[str, Any]:
        """Atomically replace the state by `update(current state or None)` (compare-and-set); returns it.
        `audit(conn, state)` records the version (in the update's SQLite transaction where there is one)."""

    def expiry(self, session_id: str, now: float) -> tuple[float | None, float | None]:
        """(session expires_at, l2 expires_at), None where absent."""


HOT_SCHEMA = """
CREATE TABLE IF NOT EXISTS hot_primary(
    id INTEGER PRIMARY KEY CHECK (id = 1), store_uid TEXT NOT NULL, epoch INTEGER NOT NULL,
    active TEXT NOT NULL, next_try REAL NOT NULL, changed_at REAL NOT NULL, reason TEXT NOT NULL);
"""


class FallbackBackend:
    """Redis first, SQLite as a write-through mirror (seed §9.7: a Redis failure must not stop the flow),
    with one primary at a time for every process sharing the store.

    Which store is primary, and its epoch, live in the SQLite store (`hot_primary`); Redis holds the same
    epoch under a fence key. Every write runs under the store's SQLite write lock: it reads the row, writes
    Redis fenced with that epoch (a Redis that restarted empty or was fenced off refuses), then the mirror,
    in one transaction. So the mirror holds every acknowledged write, and writers never disagree about the
    primary. On any Redis error the failing process switches the row to SQLite (epoch + 1, one warning per
    process) and the write goes to the mirror; every process follows at its next call. Every `retry_after`
    seconds one process tries Redis again: it copies every live session and L2 state of the mirror over
    Redis, sets the new epoch last, and makes Redis primary. A process started during an outage follows
    the row like any other and rejoins Redis when it returns.
    """

    def __init__(self, primary: RedisBackend, mirror: SQLiteBackend, errors: tuple[type[BaseException], ...],
                 retry_after: float = 5.0, clock: Callable[[], float] = time.time,
                 wall: Callable[[], float] = time.time):
        self.primary, self.mirror, self.conn = primary, mirror, mirror.conn
        self.errors = tuple(errors) + (FenceLost,)
        self.retry_after, self.clock, self.wall = retry_after, clock, wall  # clock: the sessions' own
        self._seen: str | None = None

        def init():
            with transaction(self.conn) as c:
                c.execute(HOT_SCHEMA.strip().rstrip(";"))
                c.execute("INSERT OR IGNORE INTO hot_primary VALUES(1, ?, 0, 'sqlite', 0, ?, 'new store')",
                          (uuid.uuid4().hex, self.wall()))
        with_retry(init)
        uid = self.conn.execute("SELECT store_uid FROM hot_primary").fetchone()[0]
        self.fence_key = f"dkilab:fence:{uid}"
        with_retry(lambda: self._locked(self._settle))  # Redis now, if it answers

    @property
    def name(self) -> str:
        return self._row(self.conn)[1]

    @property
    def active(self):
        return self.primary if self.name == "redis" else self.mirror

    @staticmethod
    def _row(c) -> tuple[int, str, float]:
        row = c.execute("SELECT epoch, active, next_try FROM hot_primary WHERE id=1").fetchone()
        return int(row[0]), row[1], float(row[2])

    def _observe(self, active: str, why: str = "") -> None:
        """One warning per switch this process sees (made here or by another process), and one when it
        starts while Redis is down."""
        if active != self._seen:
            if active == "sqlite" and self._seen is None:
                warnings.warn(f"redis backend at {self.primary.url} is unreachable{why}; using SQLite "
                              f"and retrying redis every {self.retry_after:g} s", RuntimeWarning, stacklevel=5)
            elif active == "sqlite":
                warnings.warn(f"redis backend failed{why}; continuing on SQLite and retrying redis every "
                              f"{self.retry_after:g} s", RuntimeWarning, stacklevel=5)
            elif self._seen is not None:
                warnings.warn("redis backend is back; every live session was copied back to it", RuntimeWarning,
                              stacklevel=5)
        self._seen = active

    def _settle(self, c) -> tuple[int, str]:
        """The primary now, inside the write lock: try Redis again when its retry time has come."""
        epoch, active, next_try = self._row(c)
        why = ""
        if active == "sqlite" and self.wall() >= next_try:
            try:
                self.primary.ping()
                new = max(epoch, self.primary.fence_epoch(self.fence_key) or 0) + 1
                sessions, states = SQLiteBackend.live(c, self.clock())
                self.primary.restore(sessions, states, self.clock(), self.fence_key, new)
            except self.errors as exc:
                why = f" ({type(exc).__name__}: {exc})"
                c.execute("UPDATE hot_primary SET next_try=? WHERE id=1", (self.wall() + self.retry_after,))
            else:
                c.execute("UPDATE hot_primary SET epoch=?, active='redis', changed_at=?, reason='recovered' WHERE id=1",
                          (new, self.wall()))
                epoch, active = new, "redis"
        self._observe(active, why)
        return epoch, active

    def _fail_over(self, c, epoch: int, exc: BaseException) -> None:
        """Make SQLite primary (if the row still names Redis at `epoch`)."""
        reason = f"{type(exc).__name__}: {exc}"
        c.execute("UPDATE hot_primary SET epoch=epoch+1, active='sqlite', next_try=?, changed_at=?, reason=? "
                  "WHERE id=1 AND active='redis' AND epoch=?", (self.wall() + self.retry_after, self.wall(),
                                                                reason[:500], epoch))
        self._observe(self._row(c)[1], f" ({reason})")

    def _write(self, on_primary: Callable[[Any, tuple[str, int]], Any], on_mirror: Callable[[Any], Any]):
        """`on_primary(c, fence)` (Redis, then the mirror in `c`) when Redis is primary, else `on_mirror(c)`;
        one transaction under the store's write lock."""
        def run():
            with transaction(self.conn) as c:
                epoch, active = self._settle(c)
                if active == "redis":
                    try:
                        return on_primary(c, (self.fence_key, epoch))
                    except self.errors as exc:
                        self._fail_over(c, epoch, exc)
                return on_mirror(c)
        return with_retry(run)

    def _read(self, method: str, *args):
        epoch, active, next_try = self._row(self.conn)
        if active == "sqlite" and self.wall() >= next_try:
            epoch, active = with_retry(lambda: self._locked(self._settle))
        else:
            self._observe(active)
        if active == "redis":
            try:
                return getattr(self.primary, method)(*args, fence=(self.fence_key, epoch))
            except self.errors as exc:
                failure = exc  # the except name is unbound when the block ends; the retries run inside it
                with_retry(lambda: self._locked(lambda c: self._fail_over(c, epoch, failure)))
        return getattr(self.mirror, method)(*args)  # the mirror holds every acknowledged write

    def _locked(self, fn):
        with transaction(self.conn) as c:
            return fn(c)

    # --- the backend interface ------------------------------------------------------------------
    def get_session(self, session_id, now):
        return self._read("get_session", session_id, now)

    def get_l2(self, session_id, now):
        return self._read("get_l2", session_id, now)

    def expiry(self, session_id, now):
        return self._read("expiry", session_id, now)

    def create_session(self, session_id, data, ttl, now):
        def primary(c, fence):
            created = self.primary.create_session(session_id, data, ttl, now, fence=fence)
            if created:
                SQLiteBackend.put_session_in(c, session_id, data, now + ttl)
            return created
        return self._write(primary, lambda c: SQLiteBackend.create_in(c, session_id, data, ttl, now))

    def touch_session(self, session_id, ttl, l2_ttl, now):
        def primary(c, fence):
            touched = self.primary.touch_session(session_id, ttl, l2_ttl, now, fence=fence)
            if touched and not SQLiteBackend.touch_in(c, session_id, ttl, l2_ttl, now):
                data = self.primary.get_session(session_id, now, fence=fence)  # the mirror lacked it: copy it over
                if data is not None:
                    SQLiteBackend.put_session_in(c, session_id, data, now + ttl)
            return touched
        return self._write(primary, lambda c: SQLiteBackend.touch_in(c, session_id, ttl, l2_ttl, now))

    def update_l2(self, session_id, update, ttl, now, audit=None):
        def primary(c, fence):
            state = self.primary.update_l2(session_id, update, ttl, now, fence=fence)
            SQLiteBackend.put_l2_in(c, session_id, state, now + ttl)
            if audit is not None:
                audit(c, state)
            return state
        return self._write(primary, lambda c: SQLiteBackend.update_l2_in(c, session_id, update, ttl, now, audit))
