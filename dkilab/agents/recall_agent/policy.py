"""The two policies behind one interface: `RulePolicy` (cue rules, no LLM) and `LLMPolicy` (the model
plans each next tool call in its own tool-call format and writes the view; malformed or invalid
output falls back to the rule step and is counted)."""
from __future__ import annotations

import json
from typing import Literal
import re

from pydantic import ValidationError

from dkilab.agents.recall_agent.contract import MemoryView
from dkilab.agents.recall_agent.reflect import Reflection, decide
from dkilab.agents.recall_agent.state import AgentState, Candidate
from dkilab.agents.recall_agent.steps import ToolCall, choose_tool
from dkilab.agents.recall_agent.tools import SIGNATURES, TOOLS, validate_call
from dkilab.prompts import AGENT_PLAN as PLAN, AGENT_SYNTH as SYNTH  # prompt texts: dkilab/prompts.py


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


def _found(state: AgentState, limit: int = 12) -> str:
    rows = [c.message for c in state.relevant()[:limit]] or list(state.seen.values())[-limit:]
    return "\n".join(f"{m.message_id} | {m.role} | {m.timestamp:%Y-%m-%d} | {m.content[:100]}" for m in rows) or "(none)"


class LLMPolicy:
    """`model.generate` plans and synthesises; `formatter` (the model's tool-call syntax, from
    `dkilab.recall.create_formatter`) writes the examples and parses the calls."""
    name = "llm"

    def __init__(self, model, formatter, max_new_tokens: int = 96):
        self.model, self.formatter, self.max_new_tokens = model, formatter, max_new_tokens
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
        return planned if isinstance(planned, ToolCall) else self.rule.next(state, r, max_calls)

    def _ask(self, prompt: str) -> str:
        return self.model.generate([{"role": "user", "content": prompt}], max_new_tokens=self.max_new_tokens)

    def _plan(self, state: AgentState, r, max_calls) -> ToolCall | None | Literal[False]:
        """The model's next call (validated), False for STOP, None when it fell back (counted)."""
        state.policy_steps += 1
        nar = state.narrowing
        example = self.formatter.format_tool_call("lexical_search", {"query_text": "spicy", "filter": {"role": "user"}})
        prompt = PLAN.format(question=state.question, hypotheses="; ".join(h.evidence_rule for h in state.hypotheses),
                             since=nar.time_range.since, until=nar.time_range.until, role=nar.role or "any",
                             tools="\n".join(SIGNATURES.values()), example=example, found=_found(state),
                             calls="\n".join(f"{c.tool} {json.dumps(c.args, default=str, ensure_ascii=False)}"
                                             for c in state.calls) or "(none)")
        text = self._ask(prompt)
        state.steps.append({"policy": "llm", "plan_output": text[:400]})
        call = self.formatter.detect_tool_call(text, TOOLS)
        if call is None:
            if r is not None and text.strip().upper().startswith("STOP") and state.relevant():
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
        focus = min((h for h in range(len(state.hypotheses)) if h not in state.searched), default=0)
        return ToolCall(name, args, PLANNED, focus)

    def view(self, state: AgentState, chosen: list[Candidate]) -> MemoryView | None:
        """The model's view of the chosen candidates, validated (ids must be among them); None = fell back."""
        if not chosen:
            return None
        state.policy_steps += 1
        found = "\n".join(f"{c.message.message_id} | {c.message.role} | {c.message.timestamp:%Y-%m-%d} | "
                          f"{c.message.content[:160]}" for c in chosen)
        text = self._ask(SYNTH.format(question=state.question, found=found))
        state.steps.append({"policy": "llm", "synthesis_output": text[:400]})
        ids = {c.message.message_id for c in chosen}
        try:
            m = _JSON.search(text)
            view = MemoryView.model_validate(json.loads(m.group(0)) if m else None)
            bad = [i for item in view.items() for i in item.evidence_ids if i not in ids]
            if bad or not view.items():
                raise ValueError(f"evidence ids {bad} were not found" if bad else "empty view")
        except (ValueError, ValidationError, TypeError) as exc:
            state.steps.append({"policy": "llm", "invalid_view": str(exc)[:200], "fallback": "invalid view"})
            state.fallbacks += 1
            return None
        return view
