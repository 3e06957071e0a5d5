"""Synthesis (seed recall-agent §5): the smallest view that answers the question, every statement with
its evidence, conflicts adjudicated (losers kept and marked `superseded_by`, undecidable pairs kept
and marked uncertain), and honest limits."""
from __future__ import annotations

from dkilab.agents.recall_agent import cues
from dkilab.agents.recall_agent.adjudicate import adjudicate
from dkilab.agents.recall_agent.contract import Limits, MemoryView, RecallOutput, ViewItem, evidence_item
from dkilab.agents.recall_agent.state import AgentState, Candidate


def item_kind(c: Candidate, default: str) -> str:
    """A statement's own cues decide its kind (an allergy is a constraint even in a preference question)."""
    for kind in ("constraints", "preferences"):
        if cues.has_cue(c.statement, cues.KIND_CUES[kind]):
            return kind
    return default


def confidence(c: Candidate) -> float:
    conf = 0.9 if c.message.role == "user" else 0.6
    return round(conf - (0.2 if c.hedged else 0.0), 2)


def selected(state: AgentState, max_items: int) -> list[Candidate]:
    """The candidates the view reports: the best `max_items` per hypothesis plus every side of a conflict."""
    in_conflict = {i for x in state.conflicts for i in (x.older, x.newer)}
    keep: dict[str, Candidate] = {}
    for h in range(len(state.hypotheses)):
        for c in state.relevant(h)[:max_items]:
            keep[c.message.message_id] = c
    for i in in_conflict:
        c = state.candidates[i]
        if c.flag != "third_party":
            keep[i] = c
    return sorted(keep.values(), key=lambda c: (c.message.timestamp, c.message.turn_id))


def rule_view(state: AgentState, chosen: list[Candidate]) -> MemoryView:
    """Statements from the candidates, with the adjudication marks applied."""
    lost = {}
    uncertain = set()
    for x in state.conflicts:
        if x.winner is None:
            uncertain |= {x.older, x.newer}
        else:
            loser = x.older if x.winner == x.newer else x.newer
            lost[loser] = (x.winner, x.reason)
    view = MemoryView()
    seen_statements = set()
    for c in chosen:
        mid = c.message.message_id
        if c.statement in seen_statements and mid not in lost:
            continue
        seen_statements.add(c.statement)
        kind = item_kind(c, state.hypotheses[c.hypothesis].kind)
        item = ViewItem(statement=c.statement, evidence_ids=[mid], confidence=confidence(c))
        if mid in lost:
            item.superseded_by, item.reason = lost[mid]
        elif mid in uncertain:
            item.uncertain, item.reason, item.confidence = True, "unresolved", 0.5
        getattr(view, kind).append(item)
    return view


def limits(state: AgentState, note: str | None = None) -> Limits:
    nar = state.narrowing
    return Limits(time_range=nar.time_range, role=nar.role, messages_considered=len(state.seen),
                  widened=list(state.widened), narrowed=list(state.narrowed), note=note)


def synthesize(state: AgentState, max_items: int = 5, view: MemoryView | None = None) -> RecallOutput:
    """The §2.2 output: `view` (the LLM policy's, whose adjudication stands as written) or else the rule view
    over the selected candidates, their verbatim evidence and the limits of what was searched."""
    adjudicate(state)
    if view is None:
        view = rule_view(state, selected(state, max_items))
    cited = [i for item in view.items() for i in item.evidence_ids]
    evidence = [evidence_item(state.seen[i]) for i in dict.fromkeys(cited)]
    note = None if view.active() else "no evidence in the searched range" + (
        f" (searched: {', '.join(state.widened)})" if state.widened else "")
    return RecallOutput(memory_view=view, evidence=evidence, limits=limits(state, note))
