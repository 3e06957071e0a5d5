"""SQLite connection set-up shared by the store and the session backends (WAL + retries)."""
from __future__ import annotations

import random
import sqlite3
import threading
import time
from typing import Callable, TypeVar

T = TypeVar("T")


class Connection(sqlite3.Connection):
    """A connection shared by threads: `transaction` holds its lock, so one thread's transaction never
    interleaves with another's on the same connection (other processes are kept out by SQLite's lock)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.write_lock = threading.RLock()


def connect(path: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, timeout=30.0, isolation_level=None, check_same_thread=False, factory=Connection)
    conn.row_factory = sqlite3.Row
    if path != ":memory:":
        conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("PRAGMA busy_timeout=30000")
    return conn


def with_retry(fn: Callable[[], T], attempts: int = 20) -> T:
    """Run `fn` (one write transaction), retrying while another process holds the write lock."""
    for i in range(attempts):
        try:
            return fn()
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) and "busy" not in str(exc) or i == attempts - 1:
                raise
            time.sleep(min(2.0, 0.02 * 2**i) * (0.5 + random.random()))
    raise AssertionError("unreachable")


class transaction:
    """`with transaction(conn):` BEGIN IMMEDIATE ... COMMIT, ROLLBACK on error."""

    def __init__(self, conn: sqlite3.Connection):
        self.conn = conn
        self.lock = getattr(conn, "write_lock", None) or threading.RLock()

    def __enter__(self) -> sqlite3.Connection:
        self.lock.acquire()
        try:
            self.conn.execute("BEGIN IMMEDIATE")
        except BaseException:
            self.lock.release()
            raise
        return self.conn

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            self.conn.execute("ROLLBACK" if exc_type else "COMMIT")
        finally:
            self.lock.release()
