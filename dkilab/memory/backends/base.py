"""The interface both hot-state backends implement, and the Redis -> SQLite fallback (seed §9.7)."""
from __future__ import annotations

import warnings
from typing import Any, Protocol


class HotStateBackend(Protocol):
    """Sessions and current L2 state, both expiring `ttl` seconds after their last write."""

    name: str

    def create_session(self, session_id: str, data: dict[str, Any], ttl: float, now: float) -> bool:
        """Store a new session; False if the id is taken."""

    def get_session(self, session_id: str, now: float) -> dict[str, Any] | None: ...

    def touch_session(self, session_id: str, ttl: float, now: float) -> bool: ...

    def get_l2(self, session_id: str, now: float) -> dict[str, Any] | None: ...

    def set_l2(self, session_id: str, state: dict[str, Any], ttl: float, now: float) -> None: ...


class FallbackBackend:
    """Use `primary` (Redis); when it fails, warn once and carry on with `fallback` (SQLite)."""

    def __init__(self, primary, fallback, errors: tuple[type[BaseException], ...]):
        self.primary, self.fallback, self.errors = primary, fallback, errors
        self.active = primary

    @property
    def name(self) -> str:
        return self.active.name

    def __getattr__(self, attr: str):
        def call(*args, **kwargs):
            if self.active is self.primary:
                try:
                    return getattr(self.primary, attr)(*args, **kwargs)
                except self.errors as exc:
                    warnings.warn(f"redis backend failed ({exc}); continuing on SQLite", RuntimeWarning, stacklevel=3)
                    self.active = self.fallback
            return getattr(self.fallback, attr)(*args, **kwargs)
        return call
