"""Hot-state backends for sessions and L2 (seed session-l1-l2 §2.2, §4.2): SQLite or Redis."""
from dkilab.memory.backends.base import FallbackBackend, HotStateBackend
from dkilab.memory.backends.sqlite import SQLiteBackend

__all__ = ["HotStateBackend", "SQLiteBackend", "FallbackBackend"]
