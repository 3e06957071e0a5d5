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


@dataclass
class HistoryItem:
    """One entry of the visible history list: a verbatim message or a summary with its trace id."""

    type: str  # "summary" | "message"
    content: str
    trace_id: str
    role: str | None
    token_count: int
    confidence: str  # "high" (verbatim) | "medium" (summary) | "low"
    timestamp: datetime | None = None


@dataclass
class RecalledMessage:
    """A recall candidate with its fused score and the per-signal scores that produced it."""

    message: Message
    score: float
    signals: dict[str, float] = field(default_factory=dict)


@dataclass
class RecallResult:
    messages: list[Message]  # final list: recent turns first, then recalled by relevance (deduplicated)
    keyword_hits: int = 0
    vector_hits: int = 0
    reference_scope: str | None = None
    recent_turns_added: int = 0
    ranked: list[RecalledMessage] = field(default_factory=list)  # relevance order, before the recent supplement
    keywords: list[tuple[str, float]] = field(default_factory=list)
    reference_hits: int = 0
    latency_ms: dict[str, float] = field(default_factory=dict)


@dataclass
class AssembledSuffix:
    text: str
    items: list[HistoryItem]
    total_tokens: int
    message_count: int
    summary_count: int
    has_fact_call_instruction: bool
    trace_ids: list[str]
    history_tokens: int = 0
    dropped_for_budget: int = 0


@dataclass
class FactRequest:
    trace_id: str
    query: str | None = None
    offset: int = 0
    limit: int = 5


@dataclass
class FactResponse:
    messages: list[dict[str, str]]
    trace_id: str
    total_count: int
    offset: int
    has_more: bool
    found: bool = True
    error: str | None = None


@dataclass
class FactCall:
    """One fact call the model made: what it asked, whether it was valid, what it cost."""

    trace_id: str | None
    offset: int
    limit: int
    valid: bool
    tokens: int = 0
    found: bool = False
    malformed: bool = False
    round: int = 0


@dataclass
class Answer:
    """What a strategy did for one question: the answer and everything the metrics need."""

    text: str
    strategy: str = ""
    prompt_tokens: int = 0  # tokens of the final visible prompt (chat template included)
    injected_tokens: int = 0  # K/V memory columns the model attended to (0 for text-only strategies)
    generated_tokens: int = 0
    recalled_ids: list[str] = field(default_factory=list)  # message ids the strategy put before the model
    fact_calls: list[FactCall] = field(default_factory=list)
    rounds: int = 1  # generations run (the fact loop adds rounds)
    latency_ms: dict[str, float] = field(default_factory=dict)  # stage -> ms: recall, assembly, generation
    context_text: str = ""  # every memory text the model was given (prompt suffix, K/V memories, facts)
    prompt: str = ""  # the final visible prompt
    metadata: dict[str, Any] = field(default_factory=dict)
