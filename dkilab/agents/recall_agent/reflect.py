"""Reflect and Decide (seed recall-agent §4.4-4.5): after each observation, check relevance, context,
coverage, repetition and conflict, then turn the verdict into the next call or a stop."""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

from dkilab.agents.recall_agent import cues
from dkilab.agents.recall_agent.adjudicate import context_flag, find_conflicts
from dkilab.agents.recall_agent.state import AgentState, Candidate, mentions, statement_of
from dkilab.agents.recall_agent.steps import ToolCall, choose_tool, search_filter
from dkilab.memory.view import TimeRange
from dkilab.types import Message

MAX_ANCHORS = 3  # anchors whose context is read (§4.2(3): 1-3 anchors)
CONFLICT_POOL = 10  # the best candidates per hypothesis checked for conflicts (the view reports the top few)


@dataclass
class Reflection:
    relevant: list[str] = field(default_factory=list)  # new candidate ids
    irrelevant: int = 0
    needs_context: list[str] = field(default_factory=list)
    coverage_low: bool = False
    repetitive: bool = False
    conflicts: int = 0

    def verdict(self) -> dict:
        return {"relevant": len(self.relevant), "irrelevant": self.irrelevant, "needs_context": self.needs_context,
                "coverage_low": self.coverage_low, "repetitive": self.repetitive, "conflicts": self.conflicts}


def candidate(state: AgentState, m: Message, h: int, score: float, via: str) -> Candidate | None:
    """The message as evidence for hypothesis `h`, or None when it does not count (role, terms, subject)."""
    hyp, nar = state.hypotheses[h], state.narrowing
    if nar.role and m.role != nar.role:
        return None
    matched = [t for t in hyp.terms if mentions(m.content, t)]
    if hyp.phrases and not any(mentions(m.content, p) for p in hyp.phrases):
        return None
    if not matched:
        return None
    statement = statement_of(m.content, matched)
    if cues.is_request(statement):
        return None
    c = Candidate(m, h, matched, score, via, statement)
    if hyp.about_user and cues.about_someone_else(statement):
        c.flag = "third_party"
    return c


def reflect(state: AgentState, call: ToolCall, hits: list[tuple[Message, float]]) -> Reflection:
    """§4.4 over one observation. Neighbour reads feed the context check of their anchor instead."""
    r = Reflection()
    if call.tool == "neighbors":
        anchor = call.args["message_id"]
        window = [m for m, _ in hits]
        c = state.candidates.get(anchor)
        if c is not None:
            c.flag = c.flag or context_flag(c, window)
        state.expanded.add(anchor)
    else:
        new = [m for m, _ in hits if m.message_id not in state.candidates]
        r.repetitive = bool(hits) and not new
        for m, score in hits:
            if m.message_id in state.candidates:
                continue
            c = candidate(state, m, call.hypothesis, score, call.tool)
            if c is None:
                r.irrelevant += 1
                continue
            state.candidates[m.message_id] = c
            r.relevant.append(m.message_id)
        state.searched.add(call.hypothesis)
    for m, _ in hits:
        state.seen[m.message_id] = m
    rel = state.relevant()
    r.needs_context = [c.message.message_id for c in rel[:MAX_ANCHORS] if c.message.message_id not in state.expanded]
    r.coverage_low = not state.relevant(call.hypothesis)
    known = {(x.older, x.newer) for x in state.conflicts}
    top = [c for h in range(len(state.hypotheses)) for c in sorted(
        (c for c in state.candidates.values() if c.hypothesis == h), key=lambda c: -c.rank)[:CONFLICT_POOL]]
    for x in find_conflicts(top) if r.relevant or call.tool == "neighbors" else []:
        if (x.older, x.newer) not in known:
            state.conflicts.append(x)
    r.conflicts = sum(1 for x in state.conflicts if not x.followed)
    return r


def _widen(state: AgentState, h: int) -> ToolCall | None:
    """§4.2(4), too few hits: in the first window switch lexical<->semantic; then widen the window
    (7 -> 30 -> 180 days -> all) and drop role=user, searching lexically; semantic search once more last."""
    nar, hyp, q = state.narrowing, state.hypotheses[h], state.question
    tried = {t for t, hh, *_ in state.tried if hh == h}
    if not state.widened:
        for tool in ("lexical_search", "semantic_search"):
            if tool not in tried:
                return choose_tool(q, hyp, nar, h, prefer=tool)
    if nar.window != "all":
        later = [d for d in cues.LADDER if nar.days is None or d is None or d > nar.days]
        days = later[0] if later and nar.window != "date" else None
        since = None if days is None or nar.now is None else nar.now - timedelta(days=days)
        nar.time_range = TimeRange(since=since, until=nar.time_range.until if nar.window != "date" else nar.now)
        nar.days, nar.window = days, ("all" if days is None else f"{days}d")
        state.widened.append(f"time_range -> {nar.window}")
        return choose_tool(q, hyp, nar, h, prefer="lexical_search")
    if nar.role and not nar.role_locked:
        nar.role = None
        state.widened.append("role -> any")
        return choose_tool(q, hyp, nar, h, prefer="lexical_search")
    if ("semantic_search", h, nar.days, nar.window, nar.role) not in state.tried:
        return choose_tool(q, hyp, nar, h, prefer="semantic_search")
    return None


def decide(state: AgentState, r: Reflection, max_calls: int) -> ToolCall | None:
    """The next call, or None with `state.stop_reason` set (§4.5)."""
    if len(state.calls) >= max_calls:
        state.stop_reason = "call budget spent"
        return None
    if r.needs_context:
        return ToolCall("neighbors", {"message_id": r.needs_context[0], "before": 2, "after": 2},
                        "read the anchor in context before trusting it (§4.2(3))",
                        state.candidates[r.needs_context[0]].hypothesis)
    for x in state.conflicts:
        if not x.followed:  # §4.6.1: look for a later, more explicit statement
            x.followed = True
            newer = state.candidates[x.newer]
            nar = state.narrowing
            f = search_filter(nar) | {"time_range": {"since": newer.message.timestamp}}
            if nar.role is None and not nar.role_locked:
                f["role"] = "user"
            return ToolCall("lexical_search", {"query_text": " ".join(x.shared), "filter": f, "page_size": 20},
                            f"conflict on {x.shared}: search for a later statement (§4.6.1)", newer.hypothesis)
    for h in range(len(state.hypotheses)):
        if h not in state.searched:
            return choose_tool(state.question, state.hypotheses[h], state.narrowing, h)
    if not state.relevant():
        nxt = _widen(state, max(state.searched) if state.searched else 0)
        if nxt is not None:
            return nxt
        state.stop_reason = "nothing found after widening the window and the role"
        return None
    state.stop_reason = "repeated hits" if r.repetitive else "enough evidence for every hypothesis"
    return None
