"""The two policies behind one interface: `RulePolicy` (cue rules, no LLM) and `LLMPolicy` (the model
reads the recall skill and the last call's raw results, plans each next tool call in its own tool-call
format and writes the view from every message it has seen; a malformed, invalid or repeated call falls
back to the rule step and is counted, with its reason)."""
from __future__ import annotations

import json
import re
from typing import Literal

from pydantic import ValidationError

from dkilab.agents.recall_agent.contract import MemoryView
from dkilab.agents.recall_agent.reflect import Reflection, decide
from dkilab.agents.recall_agent.skill import Skill, load_skill
from dkilab.agents.recall_agent.state import AgentState, Candidate
from dkilab.agents.recall_agent.steps import ToolCall, choose_tool
from dkilab.agents.recall_agent.tools import SIGNATURES, TOOLS, validate_call
from dkilab.prompts import AGENT_PLAN as PLAN  # prompt texts: dkilab/prompts.py
from dkilab.prompts import AGENT_SYNTH as SYNTH
from dkilab.types import WindowedModel


class RulePolicy:
    name = "rule"

    def first(self, state: AgentState) -> ToolCall:
        return choose_tool(state.question, state.hypotheses[0], state.narrowing, 0)

    def next(self, state: AgentState, r: Reflection, max_calls: int) -> ToolCall | None:
        return decide(state, r, max_calls)

    def view(self, state: AgentState, chosen: list[Candidate]) -> MemoryView | None:
        return None  # the rule synthesis


_JSON = re.compile(r"\{.*\}", re.S)
PLANNED = "planned by the model"


def _rows(messages, width: int) -> str:
    return "\n".join(f"{m.message_id} | {m.role} | {m.timestamp:%Y-%m-%d} | {m.content[:width]}" for m in messages)


def _results(state: AgentState, limit: int = 10) -> str:
    """The last call's hits as the tool returned them (not filtered by the rules)."""
    if not state.calls:
        return "(no call yet)"
    if limit == 0:
        return f"({len(state.last_hits)} hits, not shown: the prompt would not fit the model's window)"
    return _rows(state.last_hits[:limit], 100) or "(no hits)"


def _seen(state: AgentState, limit: int = 16) -> list:
    """What the synthesis shows: the rules' best candidates first, then every other message seen, newest first."""
    first = [c.message for c in state.relevant()[:limit]]
    ids = {m.message_id for m in first}
    rest = sorted((m for i, m in state.seen.items() if i not in ids), key=lambda m: m.timestamp, reverse=True)
    return (first + rest)[:limit]


def _key(tool: str, args: dict) -> str:
    return tool + json.dumps(args, sort_keys=True, default=str, ensure_ascii=False)


class LLMPolicy:
    """`model.generate` plans and synthesises; `formatter` (the model's tool-call syntax, from
    `dkilab.recall.create_formatter`) writes the examples and parses the calls."""
    name = "llm"

    def __init__(self, model, formatter, max_new_tokens: int = 96, skill: Skill | None = None):
        self.model, self.formatter, self.max_new_tokens = model, formatter, max_new_tokens
        self.skill = skill or load_skill()
        self.rule = RulePolicy()

    def first(self, state: AgentState) -> ToolCall:
        planned = self._plan(state, None, 10**9)
        return planned if isinstance(planned, ToolCall) else self.rule.first(state)

    def next(self, state: AgentState, r: Reflection, max_calls: int) -> ToolCall | None:
        if len(state.calls) >= max_calls:
            state.stop_reason = "call budget spent"
            return None
        planned = self._plan(state, r, max_calls)
        if planned is False:
            state.stop_reason = "the model stopped"
            return None
        if planned is None and state.repeats >= 2:  # §4.4 repetition: two repeated calls in a row, stop
            state.stop_reason = "the model kept repeating a call"
            return None
        return planned if isinstance(planned, ToolCall) else self.rule.next(state, r, max_calls)

    def _ask(self, prompt: str) -> str:
        return self.model.generate([{"role": "user", "content": prompt}], max_new_tokens=self.max_new_tokens)

    def _fits(self, prompt: str) -> bool:
        """Whether the prompt and the reply fit the model's window (a model without a tokenizer: assumed to)."""
        if not isinstance(self.model, WindowedModel):
            return True
        return self.model.count_tokens(prompt) + self.max_new_tokens + 16 <= self.model.context_window

    def _fitted(self, build, sizes=(10, 5, 2, 0)) -> tuple[str, int] | None:
        """(the first prompt `build(size)` that fits the window, its size), shrinking what it shows; None if
        none does."""
        for size in sizes:
            prompt = build(size)
            if self._fits(prompt):
                return prompt, size
        return None

    def _plan(self, state: AgentState, r, max_calls) -> ToolCall | None | Literal[False]:
        """The model's next call (validated), False for STOP, None when it fell back (counted)."""
        state.policy_steps += 1
        nar = state.narrowing
        example = self.formatter.format_tool_call("lexical_search", {"query_text": "spicy", "filter": {"role": "user"}})
        def build(size: int) -> str:
            return PLAN.format(skill=self.skill.instructions, question=state.question,
                               hypotheses="; ".join(h.evidence_rule for h in state.hypotheses),
                               since=nar.time_range.since, until=nar.time_range.until, role=nar.role or "any",
                               tools="\n".join(SIGNATURES.values()), example=example, results=_results(state, size),
                               calls="\n".join(f"{c.tool} {json.dumps(c.args, default=str, ensure_ascii=False)}"
                                               for c in state.calls[-max(size, 1):]) or "(none)")

        fitted = self._fitted(build)
        if fitted is None:
            state.steps.append({"policy": "llm", "fallback": "plan prompt over the model's window"})
            state.fallbacks += 1
            return None
        text = self._ask(fitted[0])
        state.steps.append({"policy": "llm", "plan_output": text[:400]})
        call = self.formatter.detect_tool_call(text, TOOLS)
        if call is None:
            if r is not None and text.strip().upper().startswith("STOP") and state.seen:
                return False
            state.steps[-1]["fallback"] = "no tool call in the model's plan"
            state.fallbacks += 1
            return None
        name, args = call
        try:
            args = validate_call(name, args)
            if name == "neighbors" and args["message_id"] not in state.seen:
                raise ValueError(f"neighbors: message_id {args['message_id']!r} was not found by an earlier call")
        except ValueError as exc:
            state.steps.append({"policy": "llm", "invalid_call": str(exc), "fallback": "invalid call"})
            state.fallbacks += 1
            return None
        if _key(name, args) in {_key(c.tool, validate_call(c.tool, c.args)) for c in state.calls}:
            state.repeats += 1
            state.steps[-1] |= {"fallback": "repeated call", "repeats": state.repeats, "repeated": f"{name} {args}"}
            state.fallbacks += 1
            return None
        state.repeats = 0
        focus = min((h for h in range(len(state.hypotheses)) if h not in state.searched), default=0)
        return ToolCall(name, args, PLANNED, focus, "planned")

    def view(self, state: AgentState, chosen: list[Candidate]) -> MemoryView | None:
        """The model's view of every message it has seen (the rules' candidates first), validated: its ids must
        be among the messages shown (the evidence is then checked verbatim); None = fell back."""
        shown = _seen(state)
        if not shown:
            return None
        state.policy_steps += 1
        fitted = self._fitted(lambda size: SYNTH.format(question=state.question, found=_rows(shown[:size], 160)),
                              (16, 8, 4, 2))
        if fitted is None:
            state.steps.append({"policy": "llm", "fallback": "view prompt over the model's window"})
            state.fallbacks += 1
            return None
        prompt, size = fitted
        shown = shown[:size]
        text = self._ask(prompt)
        state.steps.append({"policy": "llm", "synthesis_output": text[:400]})
        ids = {m.message_id for m in shown}
        try:
            m = _JSON.search(text)
            view = MemoryView.model_validate(json.loads(m.group(0)) if m else None)
            bad = [i for item in view.items() for i in [*item.evidence_ids, *filter(None, [item.superseded_by])]
                   if i not in ids]
            if bad or not view.items():
                raise ValueError(f"evidence ids {bad} were not found" if bad else "empty view")
        except (ValueError, ValidationError, TypeError) as exc:
            state.steps.append({"policy": "llm", "invalid_view": str(exc)[:200], "fallback": "invalid view"})
            state.fallbacks += 1
            return None
        return view
