"""Opaque page cursors: encrypted and authenticated (Fernet), so a cursor reveals nothing (not the
store's row ids or counts) and only works for the store, query and user that made it."""
from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

MAX_CURSOR_CHARS = 2048


def query_signature(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:24]


class CursorCodec:
    def __init__(self, secret: bytes):
        from cryptography.fernet import Fernet

        self._fernet = Fernet(base64.urlsafe_b64encode(hashlib.sha256(b"dkilab-cursor:" + secret).digest()))

    def encode(self, sig: str, state: dict[str, Any]) -> str:
        return self._fernet.encrypt(json.dumps({"sig": sig, **state}, separators=(",", ":")).encode()).decode()

    def decode(self, cursor: str, sig: str) -> dict[str, Any]:
        """State of `cursor`; ValueError if it is garbled, from another store, or from another query/user."""
        from cryptography.fernet import InvalidToken

        if not isinstance(cursor, str):
            raise TypeError(f"cursor must be a string returned by this store, got {type(cursor).__name__}")
        if len(cursor) > MAX_CURSOR_CHARS or not cursor.isascii():
            raise ValueError("cursor is garbled: not a cursor returned by this store")
        try:
            state = json.loads(self._fernet.decrypt(cursor.encode()))
        except (InvalidToken, ValueError):
            raise ValueError("cursor is garbled or was issued by another store") from None
        if state.pop("sig", None) != sig:
            raise ValueError("cursor belongs to a different query, filter, tool or user; start again without a cursor")
        return state
