"""Core data types shared by every package (see ARCHITECTURE.md §1)."""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any


def to_utc(ts: datetime | str | float | int | None) -> datetime | None:
    """Normalise a timestamp to an aware UTC datetime (naive values are taken as UTC)."""
    if ts is None:
        return None
    if isinstance(ts, (int, float)):
        return datetime.fromtimestamp(ts, tz=timezone.utc)
    if isinstance(ts, str):
        try:
            ts = datetime.fromisoformat(ts.replace("Z", "+00:00"))
        except ValueError as exc:
            raise ValueError(f"timestamp {ts!r} is not ISO 8601") from exc
    if not isinstance(ts, datetime):
        raise TypeError(f"timestamp must be datetime, ISO string or epoch seconds, got {type(ts).__name__}")
    if ts.tzinfo is None:
        return ts.replace(tzinfo=timezone.utc)
    return ts.astimezone(timezone.utc)


@dataclass
class Message:
    """One chat message. `message_id` is the trace id used by recall, summaries and fact calls."""

    message_id: str
    user_id: str
    session_id: str
    turn_id: int
    role: str
    content: str
    timestamp: datetime
    topic: str | None = None
    speaker: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("message_id", "user_id", "session_id", "role"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise ValueError(f"Message.{name} must be a non-empty string, got {value!r}")
        if not isinstance(self.content, str):
            raise ValueError(f"Message {self.message_id!r}: content must be a string")
        self.user_id = str(self.user_id)
        self.turn_id = int(self.turn_id)
        self.timestamp = to_utc(self.timestamp)
        if self.timestamp is None:
            raise ValueError(f"Message {self.message_id!r}: timestamp is required")


@dataclass
class Hit:
    """A query result: the message and, where the tool ranks, its score."""

    message: Message
    score: float | None = None

    def __getattr__(self, name: str) -> Any:
        # hit.content, hit.message_id ... read through to the message
        if name == "message":
            raise AttributeError(name)
        return getattr(self.message, name)


@dataclass
class Page:
    """One page of a paged query. `next_cursor` is opaque and None on the last page."""

    items: list[Hit]
    next_cursor: str | None = None

    def __iter__(self):
        return iter(self.items)

    def __len__(self) -> int:
        return len(self.items)


@dataclass
class QAItem:
    """One evaluation question about a conversation, in the normalised form every loader produces."""

    question: str
    answer: str | None
    category: str | int | None = None
    evidence_ids: list[str] = field(default_factory=list)  # message ids (trace ids) of the gold evidence
    answerable: bool = True
    question_date: datetime | None = None
    choices: dict[str, str] | None = None  # multiple choice: letter -> text; `answer` is then the letter
    qid: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass
class Conversation:
    """One user's history (messages in time order) and the questions asked about it."""

    conversation_id: str
    user_id: str
    messages: list[Message]
    questions: list[QAItem] = field(default_factory=list)
    language: str = "en"
    speakers: dict[str, str] = field(default_factory=dict)  # role -> speaker name
    preferences: list[str] = field(default_factory=list)  # a user profile, where the dataset has one
    metadata: dict[str, Any] = field(default_factory=dict)
