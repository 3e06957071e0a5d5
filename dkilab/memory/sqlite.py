"""SQLite connection set-up shared by the store and the session backends (WAL + retries)."""
from __future__ import annotations

import random
import sqlite3
import time
from typing import Callable, TypeVar

T = TypeVar("T")


def connect(path: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, timeout=30.0, isolation_level=None, check_same_thread=False)
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

    def __enter__(self) -> sqlite3.Connection:
        self.conn.execute("BEGIN IMMEDIATE")
        return self.conn

    def __exit__(self, exc_type, exc, tb) -> None:
        self.conn.execute("ROLLBACK" if exc_type else "COMMIT")
