"""Opaque, signed page cursors: a cursor only works for the query and user that made it."""
from __future__ import annotations

import base64
import hashlib
import hmac
import json
from typing import Any


def query_signature(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:24]


class CursorCodec:
    def __init__(self, secret: bytes):
        self._secret = secret

    def encode(self, sig: str, state: dict[str, Any]) -> str:
        payload = base64.urlsafe_b64encode(json.dumps({"sig": sig, **state}, separators=(",", ":")).encode())
        mac = hmac.new(self._secret, payload, hashlib.sha256).hexdigest()[:16]
        return payload.decode().rstrip("=") + "." + mac

    def decode(self, cursor: str, sig: str) -> dict[str, Any]:
        """State of `cursor`; ValueError if it is garbled, from another store, or from another query/user."""
        if not isinstance(cursor, str) or "." not in cursor:
            raise ValueError(f"cursor {cursor!r} is garbled: not a cursor returned by this store")
        body, mac = cursor.rsplit(".", 1)
        payload = (body + "=" * (-len(body) % 4)).encode()
        expected = hmac.new(self._secret, payload, hashlib.sha256).hexdigest()[:16]
        if not hmac.compare_digest(mac, expected):
            raise ValueError("cursor is garbled or was issued by another store")
        try:
            state = json.loads(base64.urlsafe_b64decode(payload))
        except (ValueError, UnicodeDecodeError) as exc:  # pragma: no cover - mac already checked
            raise ValueError("cursor is garbled") from exc
        if state.pop("sig", None) != sig:
            raise ValueError("cursor belongs to a different query, filter, tool or user; start again without a cursor")
        return state
