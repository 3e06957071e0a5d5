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
TOO_MANY = 10  # more relevant candidates than this for one hypothesis: narrow (§4.2(4))
ENOUGH = 2  # fewer than this for one hypothesis: rewrite its query from what was found (§4.4)


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


def _judge(state: AgentState, m: Message, h: int) -> tuple[list[str], str] | None:
    """(matched terms, statement) when `m` mentions hypothesis `h`'s terms (and its phrases), else None."""
    hyp = state.hypotheses[h]
    matched = [t for t in hyp.terms if mentions(m.content, t)]
    if not matched or (hyp.phrases and not any(mentions(m.content, p) for p in hyp.phrases)):
        return None
    return matched, statement_of(m.content, matched)


def candidate(state: AgentState, m: Message, h: int, score: float, via: str) -> Candidate | None:
    """The message as evidence, or None when it does not count (role, terms, a request). Relevance is judged
    against the hypotheses (§4.4): a statement that names another hypothesis' kind ("我对花生过敏" under a
    preference hypothesis when a constraint hypothesis exists) is evidence for that one."""
    nar = state.narrowing
    if nar.role and m.role != nar.role:
        return None
    judged = _judge(state, m, h)
    if judged is None or cues.is_request(judged[1]):
        return None
    kind = cues.statement_kind(judged[1])
    if kind is not None and kind != state.hypotheses[h].kind:
        other = next((i for i, x in enumerate(state.hypotheses) if x.kind == kind), None)
        if other is not None and (rejudged := _judge(state, m, other)) is not None:
            h, judged = other, rejudged
    matched, statement = judged
    c = Candidate(m, h, matched, score, via, statement, fit=kind == state.hypotheses[h].kind)
    if state.hypotheses[h].about_user and cues.about_someone_else(statement):
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
                if call.step == "narrow_hits":
                    state.candidates[m.message_id].focused = True
                continue
            c = candidate(state, m, call.hypothesis, score, call.tool)
            if c is not None and call.step == "standing" and not cues.standing(c.statement):
                c = None  # before the window only what holds until the user says otherwise counts
            if c is None:
                r.irrelevant += 1
                continue
            c.focused = call.step == "narrow_hits"
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
    r.conflicts = sum(1 for x in state.conflicts if x.open)
    return r


def _widen(state: AgentState, h: int) -> ToolCall | None:
    """§4.2(4), too few hits: in the first window switch lexical<->semantic; then widen the window
    (7 -> 30 -> 180 days -> all) and drop role=user, searching lexically; semantic search once more last."""
    nar, hyp, q = state.narrowing, state.hypotheses[h], state.question
    tried = _tools_tried(state, h)
    if not state.widened:
        for tool in ("lexical_search", "semantic_search"):
            if tool not in tried:
                return _as(choose_tool(q, hyp, nar, h, prefer=tool), "widen")
    if nar.window != "all":
        later = [d for d in cues.LADDER if nar.days is None or d is None or d > nar.days]
        days = later[0] if later and nar.window != "date" else None
        since = None if days is None or nar.now is None else nar.now - timedelta(days=days)
        nar.time_range = TimeRange(since=since, until=nar.time_range.until if nar.window != "date" else nar.now)
        nar.days, nar.window = days, ("all" if days is None else f"{days}d")
        state.widened.append(f"time_range -> {nar.window}")
        return _as(choose_tool(q, hyp, nar, h, prefer="lexical_search"), "widen")
    if nar.role and not nar.role_locked:
        nar.role = None
        state.widened.append("role -> any")
        return _as(choose_tool(q, hyp, nar, h, prefer="lexical_search"), "widen")
    if ("semantic_search", h, nar.days, nar.window, nar.role) not in state.tried:
        return _as(choose_tool(q, hyp, nar, h, prefer="semantic_search"), "widen")
    return None


def _tools_tried(state: AgentState, h: int) -> set[str]:
    return {t for t, hh, *_ in state.tried if hh == h}


def _as(call: ToolCall, step: str, why: str | None = None) -> ToolCall:
    call.step = step
    call.why = why or call.why
    return call


def conflict_step(state: AgentState) -> ToolCall | None:
    """§4.6.1 for the first open conflict: the neighbours of both sides, then a lexical search for a later
    statement on the shared terms, then a semantic one for a paraphrase of the newer statement."""
    for x in state.conflicts:
        if not x.open:
            continue
        newer = state.candidates[x.newer]
        if not x.context_read:
            side = next((i for i in (x.older, x.newer) if i not in state.expanded), None)
            if side is not None:
                return ToolCall("neighbors", {"message_id": side, "before": 2, "after": 2},
                                f"conflict on {x.shared}: read {side} in context (§4.6.1(1))", newer.hypothesis,
                                "conflict_context")
            x.context_read = True
        nar = state.narrowing
        f = search_filter(nar) | {"time_range": {"since": newer.message.timestamp}}
        if nar.role is None and not nar.role_locked:
            f["role"] = "user"
        if not x.followed:
            x.followed = True
            return ToolCall("lexical_search", {"query_text": " ".join(x.shared), "filter": f, "page_size": 20},
                            f"conflict on {x.shared}: search for a later statement (§4.6.1)", newer.hypothesis,
                            "conflict_lexical")
        x.followed_semantic = True
        return ToolCall("semantic_search", {"query_text": newer.statement, "filter": f, "top_k": 10},
                        f"conflict on {x.shared}: search for a paraphrased later statement (§4.6.1(3))",
                        newer.hypothesis, "conflict_semantic")
    return None


def standing_step(state: AgentState) -> ToolCall | None:
    """Once per hypothesis, a lexical search before the window (a default 30 days, or a "最近" / "last time"
    cue) for statements that hold until the user says otherwise: an allergy stated 45 days ago is in the view,
    or flagged as superseded by a later statement at least as explicit, never windowed away. An explicit date in
    the question asks about that date only."""
    nar = state.narrowing
    if nar.time_range.since is None or nar.window == "date":
        return None
    for h, hyp in enumerate(state.hypotheses):
        if h in state.standing_searched:
            continue
        state.standing_searched.add(h)
        f = search_filter(nar) | {"time_range": {"until": nar.time_range.since}}
        return ToolCall("lexical_search", {"query_text": hyp.query, "filter": f, "page_size": 20},
                        f"standing statements before the window ({nar.window}): a time window never hides them", h,
                        "standing")
    return None


def _key_term(state: AgentState, h: int) -> str:
    """The hypothesis' most specific term: the question's own word found most often among its candidates."""
    hyp = state.hypotheses[h]
    own = [t for t in hyp.terms if t in state.question or t.lower() in state.question.lower()] or hyp.terms
    return max(own, key=lambda t: (sum(t in c.matched for c in state.relevant(h)), len(t)))


def narrow_step(state: AgentState, h: int) -> ToolCall:
    """§4.2(4) too many hits: one lexical search in a shorter window (30 -> 7 days) that requires the key
    term as a phrase; what it finds again ranks first (`Candidate.focused`)."""
    nar = state.narrowing
    shorter = [d for d in cues.LADDER if d is not None and (nar.days is None or d < nar.days)]
    days = shorter[-1] if shorter and nar.window != "date" else None
    key = _key_term(state, h)
    f = search_filter(nar)
    if days is not None and nar.now is not None:
        f["time_range"] = {**f.get("time_range", {}), "since": nar.now - timedelta(days=days)}
    words = [w for w in state.hypotheses[h].query.split() if w != key and not w.startswith('"')][:6]
    what = (f"window {nar.days or nar.window}{'d' if nar.days else ''} -> {days}d, " if days is not None
            else "") + f'require "{key}"'
    state.narrowed.append(f"{state.hypotheses[h].kind}: {what}")
    state.narrowed_for.add(h)
    return ToolCall("lexical_search", {"query_text": " ".join([f'"{key}"', *words]), "filter": f, "page_size": 20},
                    f"too many hits ({len(state.relevant(h))}) for {state.hypotheses[h].kind}: {what}", h,
                    "narrow_hits")


def rewrite_step(state: AgentState, h: int) -> ToolCall | None:
    """§4.4 query rewriting: names and dates the hypothesis' evidence mentions that its query lacks
    ("那个项目" -> the project "Phoenix") become its terms and the next query."""
    hyp = state.hypotheses[h]
    known = " ".join([state.question, hyp.query, *hyp.terms]).lower()
    found = [e for c in state.relevant(h)[:MAX_ANCHORS] for e in cues.entities(c.message.content[:300])]
    new = [e for e in dict.fromkeys(found) if e.lower() not in known][:3]
    state.rewritten.add(h)
    if not new:
        return None
    hyp.terms += new
    hyp.rewrites += new
    for c in state.candidates.values():  # what was found before now also matches the new terms (conflicts share them)
        if c.hypothesis == h:
            c.matched += [t for t in new if t not in c.matched and mentions(c.message.content, t)]
    return ToolCall("lexical_search", {"query_text": " ".join(new), "filter": search_filter(state.narrowing),
                                       "page_size": 20}, f"rewrite the query with what the last round found: {new}", h,
                    "rewrite_query")


def decide(state: AgentState, r: Reflection, max_calls: int) -> ToolCall | None:
    """The next call, or None with `state.stop_reason` set (§4.5). In order: read anchors in context,
    work open conflicts, search unsearched hypotheses, narrow a hypothesis with too many hits, rewrite
    a thin or pointed-at hypothesis' query from what was found, give an empty hypothesis the other tool,
    look for standing statements before the window, widen when nothing is found; stop when every hypothesis has
    evidence or is shown empty."""
    if len(state.calls) >= max_calls:
        state.stop_reason = "call budget spent"
        return None
    if r.needs_context:
        return ToolCall("neighbors", {"message_id": r.needs_context[0], "before": 2, "after": 2},
                        "read the anchor in context before trusting it (§4.2(3))",
                        state.candidates[r.needs_context[0]].hypothesis, "read_context")
    if (call := conflict_step(state)) is not None:
        return call
    for h in range(len(state.hypotheses)):
        if h not in state.searched:
            return choose_tool(state.question, state.hypotheses[h], state.narrowing, h)
    for h in range(len(state.hypotheses)):
        if len(state.relevant(h)) > TOO_MANY and h not in state.narrowed_for:
            return narrow_step(state, h)
    pointed = cues.has_cue(state.question, cues.REFERS) is not None
    for h in range(len(state.hypotheses)):
        rel = state.relevant(h)
        if rel and h not in state.rewritten and (len(rel) < ENOUGH or pointed):
            if (call := rewrite_step(state, h)) is not None:
                return call
    if not state.widened:
        for h in range(len(state.hypotheses)):
            if not state.relevant(h) and (other := next((t for t in ("lexical_search", "semantic_search")
                                                         if t not in _tools_tried(state, h)), None)):
                return _as(choose_tool(state.question, state.hypotheses[h], state.narrowing, h, prefer=other),
                           "cover_hypothesis", f"no evidence for {state.hypotheses[h].kind} yet: try {other}")
    if state.relevant() and (call := standing_step(state)) is not None:  # (found nothing: widening reads it all)
        return call
    if not state.relevant():
        nxt = _widen(state, max(state.searched) if state.searched else 0)
        if nxt is not None:
            return nxt
        state.stop_reason = "nothing found after widening the window and the role"
        return None
    state.stop_reason = "every hypothesis has evidence or is shown empty" + (
        " (the last round only repeated earlier hits)" if r.repetitive else "")
    return None
