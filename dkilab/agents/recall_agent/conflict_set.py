"""The conflict set (conflicts.yaml): pairs of a user's statements, older and newer, and whether the newer may
supersede the older (seed recall-agent §4.6). Each pair goes through the agent's own steps (candidate,
conflict detection, adjudication, the view), so a pair the agent does not even see as a conflict fails."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from dkilab.agents.recall_agent.adjudicate import adjudicate, find_conflicts
from dkilab.agents.recall_agent.reflect import candidate
from dkilab.agents.recall_agent.state import AgentState
from dkilab.agents.recall_agent.steps import hypotheses, narrow
from dkilab.agents.recall_agent.synthesis import synthesize
from dkilab.config import read_yaml, validate
from dkilab.types import Message

FILE = Path(__file__).with_name("conflicts.yaml")
T0 = datetime(2025, 1, 6, 9, tzinfo=timezone.utc)


class ConflictCase(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str
    lang: str
    question: str
    older: str
    newer: str
    days: int = Field(ge=1)
    expect: str = Field(pattern="^(keep_both|newer)$")


@lru_cache(maxsize=1)
def load_cases(path: str = str(FILE)) -> tuple[ConflictCase, ...]:
    data = read_yaml(path)
    return tuple(validate(ConflictCase, c, path, f"conflict case {i}") for i, c in enumerate(data["cases"]))


def outcome(case: ConflictCase) -> str:
    """What the agent's steps make of the pair: newer (supersedes), older, keep_both (both in the view,
    flagged uncertain), no_conflict (both in the view, not flagged) or missed (a statement not taken as evidence)."""
    now = T0 + timedelta(days=case.days + 1)
    hyps = hypotheses(case.question)
    state = AgentState(case.question, now, hyps, narrow(case.question, None, now, hyps, None))
    msgs = [Message(f"{case.id}#0", "u", f"{case.id}-a", 0, "user", case.older, T0),
            Message(f"{case.id}#1", "u", f"{case.id}-b", 0, "user", case.newer, T0 + timedelta(days=case.days))]
    for m in msgs:
        state.seen[m.message_id] = m
        for h in range(len(hyps)):
            c = candidate(state, m, h, 0.5, "lexical_search")
            if c is not None:
                state.candidates[m.message_id] = c
                break
    if len(state.candidates) < 2:
        return "missed"
    state.conflicts = find_conflicts(state.relevant())
    adjudicate(state)
    items = {tuple(i.evidence_ids): i for i in synthesize(state).memory_view.items()}
    old, new = items.get((msgs[0].message_id,)), items.get((msgs[1].message_id,))
    if old is None or new is None:
        return "missed"
    if old.superseded_by == msgs[1].message_id:
        return "newer"
    if new.superseded_by == msgs[0].message_id:
        return "older"
    return "keep_both" if old.uncertain and new.uncertain else "no_conflict"


def evaluate(cases=None) -> dict[str, Any]:
    """Accuracy overall and per language, how often an explicit constraint survived a weaker later statement
    (`constraints_kept`), and the cases that failed with what happened instead."""
    cases = list(cases if cases is not None else load_cases())
    got = {c.id: outcome(c) for c in cases}
    out: dict[str, Any] = {"pairs": len(cases), "accuracy": _share(cases, got)}
    for lang in sorted({c.lang for c in cases}):
        out[f"accuracy_{lang}"] = _share([c for c in cases if c.lang == lang], got)
    keep = [c for c in cases if c.expect == "keep_both"]
    kept = sum(got[c.id] in ("keep_both", "no_conflict", "older") for c in keep)
    out["constraints_kept"] = round(kept / len(keep), 3) if keep else None
    out["failures"] = {c.id: got[c.id] for c in cases if got[c.id] != c.expect}
    return out


def _share(cases, got) -> float:
    return round(sum(got[c.id] == c.expect for c in cases) / len(cases), 3) if cases else 0.0


@lru_cache(maxsize=1)
def card() -> dict[str, Any]:
    """What a recall_agent cell logs about its adjudication: the set's version and size, accuracy overall
    and per language, constraints kept."""
    figures = evaluate()
    return {"set": f"conflicts-v{read_yaml(FILE)['version']}"} | {k: v for k, v in figures.items() if k != "failures"}
