"""The agent scenario sets (written by the dkilab authors, `datasets/fixtures/agents/`, card in
`datasets/fixtures/README.md`).

`agent_recall`: one user per case, a few days of chat (preferences, profile, constraints, changes over
time, assistant paraphrases that contradict the user, hypotheticals, noise), one recall question and
the gold statements (with their evidence messages) and conflicts. Message ids are `{case}#{index}`.

`agent_pointers`: one agent tree per case, memories of its agents stored under their scopes
(`{user}:{root}` and `{user}:{root}:{agent}`), a vague parameter of one agent, the gold entity facts its
pointer must name, distractors it must not, and whether no ancestor knows (it must fall back). The
question is the parameter's description; the tree, agent, parameter and task are `QAItem.task`.
"""
from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from dkilab.agents.semantic_pointer import AgentTree, node_scope
from dkilab.config import read_yaml, validate
from dkilab.eval.data.base import register_dataset, require
from dkilab.types import Conversation, Message, QAItem

DIR = Path(__file__).resolve().parents[3] / "datasets" / "fixtures" / "agents"
RECALL, POINTERS = DIR / "recall_cases.yaml", DIR / "pointer_cases.yaml"
# written after the rules were frozen on the sets above, never used to tune them
RECALL_HELDOUT, POINTERS_HELDOUT = DIR / "recall_cases_heldout.yaml", DIR / "pointer_cases_heldout.yaml"
# ambiguous referents and facts spread over several levels; the held-out half was written with the
# dev half, before the composer changes were run on either, and is never used to tune them
POINTERS_HARD, POINTERS_HARD_HELDOUT = DIR / "pointer_cases_hard.yaml", DIR / "pointer_cases_hard_heldout.yaml"


class _Case(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str
    language: Literal["zh", "en"]
    category: str


class GoldStatement(BaseModel):
    model_config = ConfigDict(extra="forbid")
    kind: Literal["preferences", "profile", "constraints"]
    statement: str
    evidence: list[int] = Field(min_length=1)  # message indices


class RecallCase(_Case):
    start: datetime
    messages: list[tuple[int, Literal["user", "assistant"], str]]  # (day, role, text)
    question: str
    asked_day: int
    gold: list[GoldStatement] = Field(default_factory=list)
    conflicts: list[dict[str, int | list[int]]] = Field(default_factory=list)  # {winner, loser} | {unresolved: [a, b]}

    @model_validator(mode="after")
    def _indices(self):
        n = len(self.messages)
        used = [i for g in self.gold for i in g.evidence]
        for c in self.conflicts:
            used += [v for x in c.values() for v in (x if isinstance(x, list) else [x])]
        bad = [i for i in used if not 0 <= i < n]
        if bad:
            raise ValueError(f"message indices {bad} out of range (the case has {n} messages)")
        return self


class PointerCase(_Case):
    tree: list[tuple[str, str | None, str]]  # (agent, parent, description)
    memories: list[tuple[str, Literal["core", "user", "assistant"], str]]  # (agent, kind, text)
    agent: str
    task: str
    param: tuple[str, str]  # (name, description)
    facts: list[list[str]] = Field(default_factory=list)  # each fact: alternatives, one must appear
    distractors: list[str] = Field(default_factory=list)
    fallback: bool = False
    ambiguous: bool = False  # two referents at the nearest level that knows: must fall back, flagged ambiguous


def _load(path: Path, model, what: str) -> list:
    raw = read_yaml(require(path, what, "It ships with the repository (datasets/fixtures/agents/)."))
    if not isinstance(raw, list):
        raise ValueError(f"{path}: expected a list of cases")
    cases = [validate(model, c, str(path), f"case {c.get('id', i) if isinstance(c, dict) else i}") for i,
             c in enumerate(raw)]
    dup = sorted({c.id for c in cases if sum(d.id == c.id for d in cases) > 1})
    if dup:
        raise ValueError(f"{path}: duplicate case ids {dup}")
    return cases


@register_dataset("agent_recall", language="mixed", scorer="auto", version="1",
                  description="Recall-agent scenarios (dkilab's own, 40 cases, zh+en): gold statements, evidence, "
                              "conflicts.", sources=(str(RECALL),))
def load_agent_recall(data=None, limit: int | None = None, question_limit: int | None = None,
                      path: str | Path | None = None) -> list[Conversation]:
    out = []
    for case in _load(Path(path) if path else RECALL, RecallCase, "agent recall cases")[:limit]:
        uid, msgs, turn = f"agent-recall:{case.id}", [], dict[str, int]()
        for i, (day, role, text) in enumerate(case.messages):
            sid = f"{case.id}-d{day}"
            turn[sid] = turn.get(sid, -1) + 1
            msgs.append(Message(f"{case.id}#{i}", uid, sid, turn[sid] // 2, role, text,
                                case.start + timedelta(days=day, minutes=2 * i)))
        ids = [m.message_id for m in msgs]
        gold = {"statements": [{"kind": g.kind, "statement": g.statement, "evidence": [ids[i] for i in g.evidence]}
                               for g in case.gold],
                "conflicts": [{k: ([ids[i] for i in v] if isinstance(v, list) else ids[v]) for k, v in c.items()}
                              for c in case.conflicts]}
        answer = "; ".join(g.statement for g in case.gold) or None
        item = QAItem(case.question, answer, case.category, [i for g in gold["statements"] for i in g["evidence"]],
                      answer is not None, case.start + timedelta(days=case.asked_day), qid=case.id,
                      metadata={"gold": gold}, session_id=msgs[-1].session_id)
        out.append(Conversation(uid, uid, msgs, [item][:question_limit], "cn" if case.language == "zh" else "en"))
    return out


@register_dataset("agent_pointers", language="mixed", scorer="auto", version="1",
                  description="Semantic-pointer scenarios (dkilab's own, 30 agent trees, zh+en): gold facts, "
                              "distractors, fallbacks.", sources=(str(POINTERS),))
def load_agent_pointers(data=None, limit: int | None = None, question_limit: int | None = None,
                        path: str | Path | None = None) -> list[Conversation]:
    start = datetime.fromisoformat("2025-06-02T09:00:00+00:00")
    out = []
    for case in _load(Path(path) if path else POINTERS, PointerCase, "agent pointer cases")[:limit]:
        uid = f"agent-ptr:{case.id}"
        try:
            tree = AgentTree.from_rows(case.tree)
            tree.node(case.agent)
        except ValueError as exc:
            raise ValueError(f"{path or POINTERS}: case {case.id}: {exc}") from None
        msgs = []
        for i, (agent, kind, text) in enumerate(case.memories):
            scope = node_scope(uid, tree, agent)
            msgs.append(Message(f"{case.id}#{i}", uid, scope, i, "system" if kind == "core" else kind, text,
                                start + timedelta(minutes=i), metadata={"kind": "core"} if kind == "core" else {}))
        name, desc = case.param
        item = QAItem(desc, None, case.category, [], not case.fallback, start + timedelta(days=1), qid=case.id,
                      task={"tree": [list(r) for r in case.tree], "agent_id": case.agent, "param_name": name,
                            "current_context": {"content": case.task}},
                      metadata={"gold": {"facts": case.facts, "distractors": case.distractors,
                                         "fallback": case.fallback or case.ambiguous, "ambiguous": case.ambiguous}})
        out.append(Conversation(uid, uid, msgs, [item][:question_limit], "cn" if case.language == "zh" else "en"))
    return out


@register_dataset("agent_recall_heldout", language="mixed", scorer="auto", version="1",
                  description="Held-out recall-agent scenarios (16, written after the rules were frozen).",
                  sources=(str(RECALL_HELDOUT),))
def load_agent_recall_heldout(data=None, limit: int | None = None, question_limit: int | None = None,
                              path: str | Path | None = None) -> list[Conversation]:
    return load_agent_recall(data, limit, question_limit, path or RECALL_HELDOUT)


@register_dataset("agent_pointers_heldout", language="mixed", scorer="auto", version="1",
                  description="Held-out semantic-pointer scenarios (14, written after the rules were frozen).",
                  sources=(str(POINTERS_HELDOUT),))
def load_agent_pointers_heldout(data=None, limit: int | None = None, question_limit: int | None = None,
                                path: str | Path | None = None) -> list[Conversation]:
    return load_agent_pointers(data, limit, question_limit, path or POINTERS_HELDOUT)


@register_dataset("agent_pointers_hard", language="mixed", scorer="auto", version="1",
                  description="Semantic-pointer trees with two candidate referents (ambiguous) or facts on several "
                              "levels (multi_level), dev half.", sources=(str(POINTERS_HARD),))
def load_agent_pointers_hard(data=None, limit: int | None = None, question_limit: int | None = None,
                             path: str | Path | None = None) -> list[Conversation]:
    return load_agent_pointers(data, limit, question_limit, path or POINTERS_HARD)


@register_dataset("agent_pointers_hard_heldout", language="mixed", scorer="auto", version="1",
                  description="Held-out half of the ambiguous and multi-level pointer trees.",
                  sources=(str(POINTERS_HARD_HELDOUT),))
def load_agent_pointers_hard_heldout(data=None, limit: int | None = None, question_limit: int | None = None,
                                     path: str | Path | None = None) -> list[Conversation]:
    return load_agent_pointers(data, limit, question_limit, path or POINTERS_HARD_HELDOUT)
