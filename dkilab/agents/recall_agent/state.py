"""What the loop knows between steps: the hypotheses and narrowing, the calls made, every message seen,
the candidates (messages that may be evidence) and the trace of steps."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property

from dkilab.agents.recall_agent import cues
from dkilab.agents.recall_agent.steps import Hypothesis, Narrowing, ToolCall
from dkilab.types import Message

_SENTENCE = re.compile(r"(?:[^。！？!?；;.\n]|\.(?=\S))+[。！？!?；;.]?")  # "3.5" and "e.g." stay whole
_CLAUSE = re.compile(r"[^，,。！？!?；;\n]+")
FOCUS = 10.0  # what a narrowed search found again ranks above everything else (§4.2(4): readable, checkable)


def mentions(text: str, term: str) -> bool:
    if term.isascii():  # whole words, with plain inflections (answer/answers, live/lived, recipes/recipe)
        base = term.lower()
        if len(base) > 3 and base.endswith("s") and not base.endswith("ss"):
            base = base[:-1]
        stem = re.escape(base.removesuffix("e") if len(base) > 3 else base)
        return re.search(rf"(?<![a-z0-9]){stem}(?:e|s|es|ed|d|ing)?(?![a-z0-9])", text.lower()) is not None
    return term in text


def statement_of(text: str, terms: list[str], limit: int = 120) -> str:
    """The sentence of `text` that mentions most of `terms` (its clause if the sentence is long)."""
    sentences = [s.strip() for s in _SENTENCE.findall(text) if s.strip()] or [text.strip()]
    best = max(sentences, key=lambda s: sum(mentions(s, t) for t in terms))
    if len(best) > limit:
        clauses = [c.strip() for c in _CLAUSE.findall(best) if c.strip()]
        best = max(clauses, key=lambda s: sum(mentions(s, t) for t in terms)) if clauses else best[:limit]
    return best


@dataclass
class Candidate:
    """A message that may be evidence for a hypothesis."""
    message: Message
    hypothesis: int
    matched: list[str]  # hypothesis terms the message mentions
    score: float  # tool score (semantic similarity or BM25), 0 for listings
    via: str
    statement: str = ""
    flag: str | None = None  # context check (§4.4): hypothetical | retracted | third_party
    fit: bool = False  # the statement names its hypothesis' kind (§4.4 relevance against the hypothesis)
    focused: bool = False  # a narrowed search (shorter window, tightened query) found it again (§4.2(4))

    @property
    def rank(self) -> float:
        return len(self.matched) + min(max(self.score, 0.0), 1.0) + 0.5 * self.fit + FOCUS * self.focused

    @cached_property
    def negated(self) -> bool:
        return cues.negated(self.statement)

    @cached_property
    def changed(self) -> bool:
        return cues.has_cue(self.statement, cues.CHANGE) is not None

    @cached_property
    def hedged(self) -> bool:
        return cues.has_cue(self.statement, cues.HEDGES) is not None

    @cached_property
    def explicitness(self) -> float:
        return cues.explicitness(self.statement, self.message.role)

    @cached_property
    def explicit_constraint(self) -> bool:
        """A constraint stated without a hedge ("我对海鲜过敏，绝对不能吃海鲜"): only as explicit a statement
        lifts it."""
        return cues.is_constraint(self.statement) and cues.hedges(self.statement) == 0


@dataclass
class Conflict:
    older: str
    newer: str
    shared: list[str]
    winner: str | None = None  # None: unresolved
    reason: str = ""  # context | source | time | unresolved | weaker_later
    followed: bool = False  # a later statement was searched for lexically (§4.6.1(2))
    context_read: bool = False  # both sides' neighbours were read (§4.6.1(1))
    followed_semantic: bool = False  # ... and by meaning (§4.6.1(3))

    @property
    def open(self) -> bool:
        return not (self.followed and self.context_read and self.followed_semantic)


@dataclass
class AgentState:
    question: str
    now: datetime
    hypotheses: list[Hypothesis]
    narrowing: Narrowing
    calls: list[ToolCall] = field(default_factory=list)
    seen: dict[str, Message] = field(default_factory=dict)
    candidates: dict[str, Candidate] = field(default_factory=dict)
    expanded: set[str] = field(default_factory=set)  # anchors whose neighbours were read
    conflicts: list[Conflict] = field(default_factory=list)
    searched: set[int] = field(default_factory=set)  # hypotheses searched at least once
    standing_searched: set[int] = field(default_factory=set)  # ... and for standing statements before the window
    tried: set[tuple] = field(default_factory=set)  # (tool, hypothesis, days, role) already run
    widened: list[str] = field(default_factory=list)
    narrowed: list[str] = field(default_factory=list)  # §4.2(4) "too many": what was narrowed, per hypothesis
    narrowed_for: set[int] = field(default_factory=set)
    rewritten: set[int] = field(default_factory=set)  # hypotheses whose query was rewritten from found entities
    status: dict[int, str] = field(default_factory=dict)  # at the stop: evidence | empty, per hypothesis
    steps: list[dict] = field(default_factory=list)
    stop_reason: str = ""
    # the last call's results, unfiltered (the LLM policy reads them)
    last_hits: list[Message] = field(default_factory=list)
    fallbacks: int = 0  # LLM policy steps that fell back to the rule step
    repeats: int = 0  # the LLM policy's plans in a row that repeated an earlier call
    policy_steps: int = 0

    def relevant(self, hypothesis: int | None = None) -> list[Candidate]:
        out = [c for c in self.candidates.values() if c.flag is None and (hypothesis is None
                                                                          or c.hypothesis == hypothesis)]
        return sorted(out, key=lambda c: -c.rank)
