"""The recall agent's input and output contract (seed recall-agent §2), as pydantic models.

`RecallOutput` is exactly §2.2: `memory_view{preferences, profile, constraints}`, `evidence` (verbatim
stored messages) and `limits` (what the recall covered). `validate_evidence` checks every evidence
item against the store: an item whose text, role or time is not the stored one is a bug.
"""
from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from dkilab.memory.view import MessageNotFoundError, TimeRange

KINDS = ("preferences", "profile", "constraints")
Kind = Literal["preferences", "profile", "constraints"]


class RecallContext(BaseModel):
    """§2.1 `context`: a default time window and a role preference (both optional)."""
    model_config = ConfigDict(extra="forbid")
    time_range: TimeRange | None = None
    role_pref: str | None = None


class ViewItem(BaseModel):
    """One statement of the memory view with the ids of the messages that support it."""
    model_config = ConfigDict(extra="forbid")
    statement: str
    evidence_ids: list[str] = Field(min_length=1)
    confidence: float = Field(ge=0.0, le=1.0)
    superseded_by: str | None = None  # the evidence id of the statement that replaced this one (§4.6)
    reason: str | None = None  # why it was superseded or left uncertain: context | source | time | unresolved
    uncertain: bool = False  # §4.6.3: conflicting evidence the agent could not adjudicate

    @property
    def active(self) -> bool:
        return self.superseded_by is None


class MemoryView(BaseModel):
    model_config = ConfigDict(extra="forbid")
    preferences: list[ViewItem] = Field(default_factory=list)
    profile: list[ViewItem] = Field(default_factory=list)
    constraints: list[ViewItem] = Field(default_factory=list)

    def items(self) -> list[ViewItem]:
        return [*self.preferences, *self.profile, *self.constraints]

    def active(self) -> list[ViewItem]:
        return [i for i in self.items() if i.active]


class EvidenceItem(BaseModel):
    """A stored message, verbatim."""
    model_config = ConfigDict(extra="forbid")
    message_id: str
    role: str
    timestamp: datetime
    content: str
    session_id: str | None = None


class Limits(BaseModel):
    """§2.2 `limits`: the window and role the recall looked at, and how many messages it read."""
    model_config = ConfigDict(extra="forbid")
    time_range: TimeRange
    role: str | None  # None: every role
    messages_considered: int | Literal["unknown"]
    widened: list[str] = Field(default_factory=list)  # how the search was widened (§4.2(4)), in order
    narrowed: list[str] = Field(default_factory=list)  # too many hits: what the view's first items were narrowed to
    note: str | None = None  # e.g. "no evidence found in the window"


class RecallOutput(BaseModel):
    model_config = ConfigDict(extra="forbid")
    memory_view: MemoryView
    evidence: list[EvidenceItem]
    limits: Limits

    @property
    def empty(self) -> bool:
        return not self.memory_view.active()


def evidence_item(message) -> EvidenceItem:
    return EvidenceItem(message_id=message.message_id, role=message.role, timestamp=message.timestamp,
                        content=message.content, session_id=message.session_id)


def validate_evidence(output: RecallOutput, memory) -> list[str]:
    """Problems with the output's evidence, [] when every item is the stored message verbatim and every
    view item cites evidence that is listed."""
    problems = []
    for ev in output.evidence:
        try:
            stored = memory.get(ev.message_id)
        except MessageNotFoundError:
            problems.append(f"{ev.message_id}: not in this user's memory")
            continue
        for name in ("content", "role", "timestamp"):
            if getattr(stored, name) != getattr(ev, name):
                problems.append(f"{ev.message_id}: {name} differs from the stored message")
    listed = {e.message_id for e in output.evidence}
    for item in output.memory_view.items():
        missing = [i for i in item.evidence_ids if i not in listed]
        if missing:
            problems.append(f"statement {item.statement[:40]!r} cites {missing}, which are not in the evidence")
    return problems
