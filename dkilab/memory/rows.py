"""How a stored message row maps to a `Message`, and the per-user names derived from a user: what the
store (`store.py`, which writes rows) and the user-bound view (`view.py`, which reads them) share."""
from __future__ import annotations

import hashlib
import json

from dkilab.types import Message


def fts_table(slot: int) -> str:
    return f"fts_u{int(slot)}"


MSG_COLS = "rid, message_id, user_id, session_id, turn_id, role, content, ts, topic, speaker, metadata"


def user_key(user_id: str) -> str:
    """A file-name-safe key for a user's FAISS index."""
    return "u" + hashlib.sha1(user_id.encode()).hexdigest()[:20]


def row_to_message(row) -> Message:
    return Message(
        message_id=row["message_id"], user_id=row["user_id"], session_id=row["session_id"],
        turn_id=row["turn_id"], role=row["role"], content=row["content"], timestamp=row["ts"],
        topic=row["topic"], speaker=row["speaker"], metadata=json.loads(row["metadata"]),
    )
