"""The conflict set (conflicts.yaml): pairs of a user's statements, older and newer, and whether the newer may
supersede the older (seed recall-agent §4.6). Each pair goes through the agent's own steps (candidate,
conflict detection, adjudication, the view), so a pair the agent does not even see as a conflict fails."""
from __future__ import annotations

import json
import re
from datetime import datetime, timedelta, timezone
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from dkilab.agents.recall_agent.adjudicate import adjudicate, find_conflicts
from dkilab.agents.recall_agent.policy import LLMPolicy
from dkilab.agents.recall_agent.reflect import candidate
from dkilab.agents.recall_agent.state import AgentState
from dkilab.agents.recall_agent.steps import hypotheses, narrow
from dkilab.agents.recall_agent.synthesis import selected, synthesize
from dkilab.config import read_yaml, validate
from dkilab.recall import create_formatter
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


class Persona:
    """A scripted model for the LLM policy's synthesis (`policy="llm"`): it reads the messages the view prompt shows
    (`id | role | date | text`, newest last by date) and adjudicates every pair one way, `newest_wins` (the later
    statement supersedes the earlier) or `keep_both` (both uncertain). What it writes is the view: under the LLM
    policy the model's adjudication stands, so the set's accuracy under a persona is the persona's."""
    name = "scripted-persona"

    def __init__(self, rule: str):
        if rule not in PERSONAS:
            raise ValueError(f"persona must be one of {PERSONAS}, got {rule!r}")
        self.rule = rule

    def generate(self, messages, max_new_tokens: int = 64) -> str:
        rows = [line.split(" | ", 3) for line in messages[-1]["content"].splitlines() if line.count(" | ") >= 3]
        rows = sorted((r for r in rows if len(r) == 4 and _DATE.fullmatch(r[2])), key=lambda r: (r[2], r[0]))
        items = [{"statement": text, "evidence_ids": [mid], "confidence": 0.9} for mid, _, _, text in rows]
        for i, item in enumerate(items[:-1]):
            if self.rule == "newest_wins":
                item["superseded_by"] = items[-1]["evidence_ids"][0]
            else:
                item["uncertain"] = items[-1]["uncertain"] = True
        return json.dumps({"preferences": [], "profile": items, "constraints": []}, ensure_ascii=False)


PERSONAS = ("newest_wins", "keep_both")
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")


def outcome(case: ConflictCase, persona: str | None = None) -> str:
    """What the agent's steps make of the pair: newer (supersedes), older, keep_both (both in the view,
    flagged uncertain), no_conflict (both in the view, not flagged) or missed (a statement not taken as evidence).
    `persona`: the view is written by the LLM policy with that scripted persona (`Persona`), else by the rules."""
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
    view = None
    if persona is not None:
        policy = LLMPolicy(Persona(persona), create_formatter("generic", "cn" if case.lang == "cn" else "en"))
        view = policy.view(state, selected(state, 5))
        if view is None:
            return "unusable"
    items = {tuple(i.evidence_ids): i for i in synthesize(state, view=view).memory_view.items()}
    old, new = items.get((msgs[0].message_id,)), items.get((msgs[1].message_id,))
    if old is None or new is None:
        return "missed"
    if old.superseded_by == msgs[1].message_id:
        return "newer"
    if new.superseded_by == msgs[0].message_id:
        return "older"
    return "keep_both" if old.uncertain and new.uncertain else "no_conflict"


def evaluate(cases=None, persona: str | None = None) -> dict[str, Any]:
    """Accuracy overall and per language, how often an explicit constraint survived a weaker later statement
    (`constraints_kept`), and the cases that failed with what happened instead; under the rule policy, or the LLM
    policy with a scripted `persona`."""
    cases = list(cases if cases is not None else load_cases())
    got = {c.id: outcome(c, persona) for c in cases}
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
