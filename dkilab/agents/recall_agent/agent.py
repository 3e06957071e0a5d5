"""RecallAgent: the Observe -> Reflect -> Decide loop (seed recall-agent §4) over one user's memory.

    agent = RecallAgent(store.for_user("alice"))           # the runtime binds the user
    result = agent.recall("你记得我有什么饮食偏好吗？")
    result.output.memory_view.preferences, result.output.evidence, result.output.limits

Every step is a span (tool, arguments, hits, reflection verdict, decision) when tracing is on.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime, timezone

from dkilab.agents.recall_agent.contract import RecallContext, RecallOutput, validate_evidence
from dkilab.agents.recall_agent.policy import PLANNED, LLMPolicy, RulePolicy
from dkilab.agents.recall_agent.reflect import Reflection, reflect
from dkilab.agents.recall_agent.skill import load_skill
from dkilab.agents.recall_agent.state import AgentState
from dkilab.agents.recall_agent.steps import ToolCall, hypotheses, narrow
from dkilab.agents.recall_agent.synthesis import selected, synthesize
from dkilab.agents.recall_agent.tools import _jsonable, run_tool
from dkilab.recall import create_formatter
from dkilab.tracing import span
from dkilab.types import ChatModel, Memory, to_utc

MAX_PAGES = 3  # pages of one listing/lexical result the agent reads while they keep yielding evidence


@dataclass
class RecallResult:
    output: RecallOutput
    steps: list[dict] = field(default_factory=list)
    tool_calls: int = 0
    rounds: int = 0  # Observe -> Reflect -> Decide cycles (a further page of one result is not a new round)
    stop_reason: str = ""
    policy_steps: int = 0
    policy_fallbacks: int = 0
    evidence_problems: list[str] = field(default_factory=list)  # validate_evidence: must stay empty
    ms: float = 0.0


class RecallAgent:
    def __init__(self, memory: Memory, policy: str = "rule", model: ChatModel | None = None, formatter=None,
                 max_calls: int = 12, max_items: int = 5, default_days: int | None = 30, skill: str | None = None):
        if policy not in ("rule", "llm"):
            raise ValueError(f"policy must be 'rule' or 'llm', got {policy!r}")
        self.policy: LLMPolicy | RulePolicy
        if policy == "llm":
            if model is None:
                raise ValueError("the llm policy needs a model")
            if formatter is None:
                formatter = create_formatter(model.name, "en")
            self.policy = LLMPolicy(model, formatter, skill=load_skill(skill))
        else:
            self.policy = RulePolicy()
        self.memory, self.max_calls, self.max_items, self.default_days = memory, max_calls, max_items, default_days

    def recall(self, question: str, context: RecallContext | dict | None = None,
               now: datetime | None = None) -> RecallResult:
        if not isinstance(question, str) or not question.strip():
            raise ValueError(f"recall agent: the question must be a non-empty string, got {question!r}")
        context = RecallContext.model_validate(context) if isinstance(context, dict) else context
        t = time.perf_counter()
        now = to_utc(now) if now is not None else datetime.now(timezone.utc)
        with span("recall_agent", question=question, policy=self.policy.name) as trace:
            hyps = hypotheses(question)
            state = AgentState(question, now, hyps, narrow(question, context, now, hyps, self.default_days))
            state.steps.append({"step": "observe", "hypotheses": [h.evidence_rule for h in hyps],
                                "narrowing": {"window": state.narrowing.window, "role": state.narrowing.role}})
            call: ToolCall | None = self.policy.first(state)
            pages, rounds = 0, 0
            while call is not None:
                try:
                    r, cursor = self._step(state, call)
                except ValueError as exc:  # a planned call the tools refuse (e.g. a forged cursor)
                    if call.why != PLANNED:
                        raise
                    state.fallbacks += 1
                    state.steps.append({"policy": "llm", "refused_call": f"{call.tool}: {exc}"})
                    call = RulePolicy().next(state, Reflection(coverage_low=not state.relevant()), self.max_calls)
                    continue
                if cursor and call.tool != "neighbors" and r.relevant and pages < MAX_PAGES - 1:
                    pages += 1  # the page kept yielding evidence: read the next one
                    # (a standing search's pages keep its step: before the window only standing statements count)
                    step = "standing" if call.step == "standing" else "page"
                    call = ToolCall(call.tool, {**call.args, "cursor": cursor}, "next page", call.hypothesis, step)
                    continue
                pages, rounds = 0, rounds + 1
                with span("agent_decide", after_step=len(state.calls), policy=self.policy.name) as decided:
                    call = self.policy.next(state, r, self.max_calls)
                    decision = ({"tool": call.tool, "args": _jsonable(call.args), "why": call.why, "step": call.step}
                                if call else {"stop": state.stop_reason})
                    decided.update(decision)
                next(s for s in reversed(state.steps) if "tool" in s)["decision"] = decision
            state.status = {h: "evidence" if state.relevant(h) else "empty" for h in range(len(hyps))}
            state.steps.append({"step": "stop", "reason": state.stop_reason, "hypotheses": {
                hyps[h].kind: st for h, st in state.status.items()}, "narrowed": state.narrowed,
                "rewrites": {hyps[h].kind: hyps[h].rewrites for h in state.rewritten if hyps[h].rewrites}})
            chosen = selected(state, self.max_items)
            output = synthesize(state, self.max_items, view=self.policy.view(state, chosen))
            problems = validate_evidence(output, self.memory)
            trace.update(memory_view=output.memory_view.model_dump(mode="json"), stop=state.stop_reason,
                         hypotheses={hyps[h].kind: st for h, st in state.status.items()}, narrowed=state.narrowed,
                         tool_calls=len(state.calls), evidence_problems=problems)
        return RecallResult(output, state.steps, len(state.calls), rounds, state.stop_reason, state.policy_steps,
                            state.fallbacks, problems, (time.perf_counter() - t) * 1000)

    def _step(self, state: AgentState, call: ToolCall) -> tuple[Reflection, str | None]:
        """Observe (run the call) and Reflect, as one traced step."""
        with span("agent_step", n=len(state.calls), step=call.step, tool=call.tool, args=_jsonable(call.args),
                  why=call.why) as out:
            nar = state.narrowing
            state.calls.append(call)
            state.tried.add((call.tool, call.hypothesis, nar.days, nar.window, nar.role))
            hits, cursor = run_tool(self.memory, call)
            state.last_hits = [m for m, _ in hits]
            r = reflect(state, call, hits)
            out.update(hits=[m.message_id for m, _ in hits], reflection=r.verdict())
        state.steps.append({"step": len(state.calls), "name": call.step, "tool": call.tool,
                            "args": _jsonable(call.args), "why": call.why,
                            "hits": [m.message_id for m, _ in hits], "reflection": r.verdict()})
        return r, cursor
